//! CREATE replay detection (MS-SMB2 3.3.5.9.10): a CREATE carrying a durable v2 request
//! names its open with a CreateGuid. A client that lost a connection (or a channel) before
//! the answer resends the CREATE with SMB2_FLAGS_REPLAY_OPERATION; it must get the open
//! it already has, not a second one (which a deny-all share mode would refuse) nor a
//! second set of oplock or lease breaks.
//!
//! Pure state. Each CreateGuid of a client is first *reserved* by the CREATE that carries
//! it (a CREATE waiting for break acknowledgments keeps its reservation while it waits, so
//! a replay meanwhile is told FILE_NOT_AVAILABLE), then *bound* to the open it made, and
//! forgotten when that open closes or the CREATE fails.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most CreateGuids remembered per share; beyond it new CREATEs are not cached (they are
/// still served, a replay of them just opens again).
pub const MAX_REPLAY_ENTRIES: usize = 65536;
/// How long a reservation outlives its CREATE at most: a CREATE waits for breaks no longer
/// than the break timeout, so an older reservation belongs to a CREATE that was cancelled
/// or whose connection went away.
pub const RESERVATION_TTL: Duration = Duration::from_secs(45);

/// A client's CreateGuid: (ClientGuid, CreateGuid).
pub type ReplayKey = ([u8; 16], [u8; 16]);

/// The CREATE request holding a reservation: its session and MessageId (a CREATE run
/// again after waiting for breaks is the same holder, even when its session moved to
/// another channel after its connection ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayHolder {
    /// The session the CREATE came in.
    pub session_id: u64,
    /// Its MessageId.
    pub message_id: u64,
}

#[derive(Debug, Clone, Copy)]
enum Entry {
    Reserved {
        holder: ReplayHolder,
        since: Instant,
    },
    Open {
        volatile: u64,
    },
}

/// What a CREATE with a CreateGuid finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The guid is (now) reserved for this CREATE: go on opening.
    Reserved,
    /// Another CREATE with this guid is still in progress.
    InProgress,
    /// The guid names this open (volatile FileId).
    Open(u64),
}

/// The CreateGuids of one share's opens.
#[derive(Debug, Default)]
pub struct ReplayCache {
    entries: HashMap<ReplayKey, Entry>,
}

impl ReplayCache {
    /// Looks `key` up for the CREATE `holder`, reserving it when it is free.
    pub fn lookup(&mut self, key: ReplayKey, holder: ReplayHolder, now: Instant) -> Lookup {
        match self.entries.get(&key) {
            Some(Entry::Open { volatile }) => Lookup::Open(*volatile),
            Some(Entry::Reserved { holder: h, since })
                if *h != holder && now.duration_since(*since) < RESERVATION_TTL =>
            {
                Lookup::InProgress
            }
            Some(Entry::Reserved { .. }) => {
                self.entries
                    .insert(key, Entry::Reserved { holder, since: now });
                Lookup::Reserved
            }
            None => {
                if self.entries.len() >= MAX_REPLAY_ENTRIES {
                    // Reservations of CREATEs that were cancelled or lost their
                    // connection are dropped before new guids go uncached.
                    self.entries.retain(|_, e| match e {
                        Entry::Reserved { since, .. } => {
                            now.duration_since(*since) < RESERVATION_TTL
                        }
                        Entry::Open { .. } => true,
                    });
                }
                if self.entries.len() < MAX_REPLAY_ENTRIES {
                    self.entries
                        .insert(key, Entry::Reserved { holder, since: now });
                }
                Lookup::Reserved
            }
        }
    }

    /// Binds `key`, reserved by `holder`, to the open it made.
    pub fn bind(&mut self, key: ReplayKey, holder: ReplayHolder, volatile: u64) -> bool {
        match self.entries.get(&key) {
            Some(Entry::Reserved { holder: h, .. }) if *h == holder => {
                self.entries.insert(key, Entry::Open { volatile });
                true
            }
            _ => false,
        }
    }

    /// Drops the reservation of a CREATE that failed.
    pub fn release(&mut self, key: ReplayKey, holder: ReplayHolder) {
        if matches!(self.entries.get(&key), Some(Entry::Reserved { holder: h, .. }) if *h == holder)
        {
            self.entries.remove(&key);
        }
    }

    /// Forgets `key` when its open `volatile` closes (or turned out to be gone).
    pub fn forget(&mut self, key: ReplayKey, volatile: u64) {
        if matches!(self.entries.get(&key), Some(Entry::Open { volatile: v }) if *v == volatile) {
            self.entries.remove(&key);
        }
    }

    /// How many guids are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: ReplayKey = ([1; 16], [2; 16]);

    fn holder(message_id: u64) -> ReplayHolder {
        ReplayHolder {
            session_id: 1,
            message_id,
        }
    }

    #[test]
    fn a_guid_is_reserved_then_bound_then_forgotten_with_its_open() {
        let mut c = ReplayCache::default();
        let now = Instant::now();
        assert_eq!(c.lookup(KEY, holder(1), now), Lookup::Reserved);
        // The same CREATE run again after waiting keeps its reservation.
        assert_eq!(c.lookup(KEY, holder(1), now), Lookup::Reserved);
        // A replay while it is in progress is told to come back.
        assert_eq!(c.lookup(KEY, holder(2), now), Lookup::InProgress);
        assert!(c.bind(KEY, holder(1), 7));
        assert_eq!(c.lookup(KEY, holder(3), now), Lookup::Open(7));
        c.forget(KEY, 8);
        assert_eq!(c.len(), 1, "only the open's own close forgets it");
        c.forget(KEY, 7);
        assert!(c.is_empty());
    }

    #[test]
    fn failed_and_abandoned_creates_free_their_guid() {
        let mut c = ReplayCache::default();
        let now = Instant::now();
        c.lookup(KEY, holder(1), now);
        c.release(KEY, holder(2));
        assert_eq!(c.len(), 1, "only the holder releases");
        c.release(KEY, holder(1));
        assert!(c.is_empty());
        c.lookup(KEY, holder(1), now);
        let later = now + RESERVATION_TTL;
        assert_eq!(c.lookup(KEY, holder(2), later), Lookup::Reserved);
        assert!(!c.bind(KEY, holder(1), 9), "the stale holder lost it");
    }
}
