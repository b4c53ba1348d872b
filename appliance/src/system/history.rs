//! Update history kept on the data partition (`DATA/system/updates.json`), so it
//! survives reboots and slot switches, and its reconciliation with what actually
//! booted: an installed update becomes `booted` when the new slot runs, `succeeded`
//! once its boot entry is blessed, `rolled_back` when boot counting gave up on it.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::boot::{EntryName, EntryState, Slot};

/// Records kept (oldest dropped first).
pub const MAX_RECORDS: usize = 50;
/// File name under `DATA/system/`.
const FILE: &str = "updates.json";

/// Where an update stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpdateState {
    /// The bundle is being received and written to the inactive slot.
    Writing,
    /// Refused (bad signature, checksum, size) or failed while writing; nothing boots it.
    Failed,
    /// Written and made the next boot; waiting for a reboot.
    Installed,
    /// The new slot is running; its health check has not blessed it yet.
    Booted,
    /// The new slot passed its health checks and is marked good.
    Succeeded,
    /// The new slot failed its boot tries; the previous slot runs again.
    RolledBack,
}

/// One update attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UpdateRecord {
    /// Sequence number.
    pub id: u64,
    /// Version in the bundle's manifest (empty when refused before it was read).
    pub version: String,
    /// Slot written.
    pub slot: Option<Slot>,
    /// Unix seconds when the upload started.
    pub started_at: i64,
    /// Unix seconds of the last state change.
    pub updated_at: i64,
    /// Current state.
    pub state: UpdateState,
    /// Bytes of root image written so far.
    pub bytes_written: u64,
    /// Why it failed or was rolled back.
    pub error: Option<String>,
}

/// Serialises every read-modify-write of the history file: an upload records its
/// progress while `GET` requests reconcile, and without this a reconcile could save its
/// stale copy over a newer record (an installed update reported as interrupted).
static FILE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The history file of a data directory.
#[derive(Debug, Clone)]
pub struct History {
    path: PathBuf,
}

impl History {
    /// History stored under `data_dir/system/`.
    pub fn new(data_dir: &Path) -> History {
        History {
            path: data_dir.join("system").join(FILE),
        }
    }

    /// All records, oldest first (an unreadable file reads as empty, and is logged).
    pub fn load(&self) -> Vec<UpdateRecord> {
        match fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %self.path.display(), error = %e, "update history unreadable; starting a new one");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        }
    }

    /// Replaces the history atomically.
    pub fn save(&self, records: &[UpdateRecord]) -> anyhow::Result<()> {
        let dir = self.path.parent().context("history path without parent")?;
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let keep = records.len().saturating_sub(MAX_RECORDS);
        let json = serde_json::to_vec_pretty(records.get(keep..).unwrap_or_default())?;
        let tmp = self.path.with_extension("json.tmp");
        let mut f =
            fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(&json)?;
        f.sync_all()?;
        fs::rename(&tmp, &self.path).with_context(|| format!("writing {}", self.path.display()))?;
        Ok(())
    }

    /// Loads the records, lets `change` modify them and saves them when it returns true,
    /// all under the file lock. Returns the records (as changed); a failed save is logged.
    pub fn modify(&self, change: impl FnOnce(&mut Vec<UpdateRecord>) -> bool) -> Vec<UpdateRecord> {
        let _guard = FILE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = self.load();
        if change(&mut all) {
            if let Err(e) = self.save(&all) {
                tracing::warn!(error = %format!("{e:#}"), "saving the update history");
            }
        }
        all
    }

    /// Adds a record or replaces the one with the same id.
    pub fn upsert(&self, record: &UpdateRecord) -> anyhow::Result<()> {
        let _guard = FILE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = self.load();
        match all.iter_mut().find(|r| r.id == record.id) {
            Some(r) => *r = record.clone(),
            None => all.push(record.clone()),
        }
        self.save(&all)
    }

    /// Next record id.
    pub fn next_id(&self) -> u64 {
        self.load().iter().map(|r| r.id).max().unwrap_or(0) + 1
    }
}

/// Moves records forward according to what booted. Pure: `booted` is the running slot,
/// `running_version` the running image version, `entries` the loader entries on the ESP.
/// Returns whether anything changed. A `Writing` record with no upload in progress
/// (`upload_active` false) was interrupted by a crash or reboot and becomes `Failed`.
pub fn reconcile(
    records: &mut [UpdateRecord],
    booted: Option<Slot>,
    running_version: &str,
    entries: &[EntryName],
    upload_active: bool,
    now: i64,
) -> bool {
    let mut changed = false;
    for r in records.iter_mut() {
        let entry = r.slot.and_then(|s| entries.iter().find(|e| e.slot == s));
        let on_new_slot = r.slot.is_some() && r.slot == booted && r.version == running_version;
        let next = match r.state {
            UpdateState::Writing if !upload_active => {
                r.error = Some("interrupted while writing (restart or power loss)".into());
                Some(UpdateState::Failed)
            }
            UpdateState::Installed | UpdateState::Booted => match entry.map(|e| e.state) {
                Some(EntryState::Good) if on_new_slot => Some(UpdateState::Succeeded),
                Some(EntryState::Trying { .. })
                    if on_new_slot && r.state == UpdateState::Installed =>
                {
                    Some(UpdateState::Booted)
                }
                Some(EntryState::Bad { done }) if !on_new_slot => {
                    r.error = Some(format!(
                        "version {} failed its health checks on {done} boot(s); the previous version runs again",
                        r.version
                    ));
                    Some(UpdateState::RolledBack)
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(state) = next {
            if state != r.state {
                r.state = state;
                r.updated_at = now;
                changed = true;
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::boot::parse_entry_name;

    fn record(state: UpdateState) -> UpdateRecord {
        UpdateRecord {
            id: 1,
            version: "0.2.0".into(),
            slot: Some(Slot::B),
            started_at: 1,
            updated_at: 1,
            state,
            bytes_written: 10,
            error: None,
        }
    }

    fn entries(names: &[&str]) -> Vec<EntryName> {
        names.iter().map(|n| parse_entry_name(n).unwrap()).collect()
    }

    #[test]
    fn installed_waits_for_reboot() {
        let mut r = vec![record(UpdateState::Installed)];
        assert!(!reconcile(
            &mut r,
            Some(Slot::A),
            "0.1.0",
            &entries(&["quarry-a.conf", "quarry-b+3.conf"]),
            false,
            5
        ));
        assert_eq!(r[0].state, UpdateState::Installed);
    }

    #[test]
    fn booted_then_succeeded() {
        let mut r = vec![record(UpdateState::Installed)];
        assert!(reconcile(
            &mut r,
            Some(Slot::B),
            "0.2.0",
            &entries(&["quarry-a.conf", "quarry-b+2-1.conf"]),
            false,
            5
        ));
        assert_eq!(r[0].state, UpdateState::Booted);
        assert!(reconcile(
            &mut r,
            Some(Slot::B),
            "0.2.0",
            &entries(&["quarry-a.conf", "quarry-b.conf"]),
            false,
            6
        ));
        assert_eq!(r[0].state, UpdateState::Succeeded);
        assert_eq!(r[0].updated_at, 6);
    }

    #[test]
    fn rolled_back_when_tries_run_out() {
        let mut r = vec![record(UpdateState::Installed)];
        assert!(reconcile(
            &mut r,
            Some(Slot::A),
            "0.1.0",
            &entries(&["quarry-a.conf", "quarry-b+0-3.conf"]),
            false,
            9
        ));
        assert_eq!(r[0].state, UpdateState::RolledBack);
        assert!(r[0].error.as_deref().unwrap_or("").contains("3 boot(s)"));
    }

    #[test]
    fn interrupted_write_fails_only_when_no_upload_runs() {
        let mut r = vec![record(UpdateState::Writing)];
        assert!(!reconcile(&mut r, Some(Slot::A), "0.1.0", &[], true, 2));
        assert!(reconcile(&mut r, Some(Slot::A), "0.1.0", &[], false, 2));
        assert_eq!(r[0].state, UpdateState::Failed);
    }

    #[test]
    fn modify_saves_only_changes() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        h.upsert(&record(UpdateState::Writing)).unwrap();
        let seen = h.modify(|r| {
            r[0].state = UpdateState::Installed;
            false
        });
        assert_eq!(seen[0].state, UpdateState::Installed);
        assert_eq!(h.load()[0].state, UpdateState::Writing);
        h.modify(|r| reconcile(r, Some(Slot::A), "0.1.0", &[], false, 3));
        assert_eq!(h.load()[0].state, UpdateState::Failed);
    }

    #[test]
    fn history_round_trips_and_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::new(dir.path());
        assert!(h.load().is_empty());
        for i in 0..(MAX_RECORDS as u64 + 5) {
            let mut r = record(UpdateState::Failed);
            r.id = h.next_id();
            assert_eq!(r.id, i + 1);
            h.upsert(&r).unwrap();
        }
        let all = h.load();
        assert_eq!(all.len(), MAX_RECORDS);
        assert_eq!(all.first().unwrap().id, 6);
        let mut last = all.last().unwrap().clone();
        last.state = UpdateState::Succeeded;
        h.upsert(&last).unwrap();
        assert_eq!(h.load().last().unwrap().state, UpdateState::Succeeded);
    }
}
