//! Persistent SMB handles of continuously available shares, kept so that a restarted
//! `quarry serve` can give each back to its client (the SMB server records and forgets
//! them through its `Backend`). Not audited: they come and go with every such open.

use rusqlite::params;

use quarry_smb::server::durable::{PersistedLock, PersistedOpen, MAX_PERSISTED_LOCKS};

use super::{now, Db, DbResult};

/// Most persistent handles kept; beyond it new ones are durable for the life of the
/// process only.
pub const MAX_PERSISTENT_OPENS: i64 = 65536;

fn guid(v: Vec<u8>) -> [u8; 16] {
    let mut g = [0u8; 16];
    if v.len() == 16 {
        g.copy_from_slice(&v);
    }
    g
}

impl Db {
    /// Records a persistent handle (replacing one with the same id).
    pub fn persist_open(&self, o: &PersistedOpen) -> DbResult<()> {
        let conn = self.lock();
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM persistent_opens", [], |r| r.get(0))?;
        if n >= MAX_PERSISTENT_OPENS {
            return Ok(());
        }
        conn.execute(
            "INSERT OR REPLACE INTO persistent_opens(persistent_id, share, path, user_name,
                 client_guid, create_guid, access, share_access, timeout_ms, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                o.persistent_id as i64,
                o.share,
                o.path,
                o.user,
                o.client_guid.to_vec(),
                o.create_guid.to_vec(),
                o.access,
                o.share_access,
                o.timeout_ms,
                now()
            ],
        )?;
        conn.execute(
            "DELETE FROM persistent_open_locks WHERE persistent_id = ?1",
            [o.persistent_id as i64],
        )?;
        Ok(())
    }

    /// Replaces the byte-range locks recorded with persistent handle `persistent_id` (a
    /// handle no longer recorded keeps none; beyond [`MAX_PERSISTED_LOCKS`] the rest are
    /// not kept).
    pub fn persist_open_locks(&self, persistent_id: u64, locks: &[PersistedLock]) -> DbResult<()> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        tx.execute(
            "DELETE FROM persistent_open_locks WHERE persistent_id = ?1",
            [persistent_id as i64],
        )?;
        let known: i64 = tx.query_row(
            "SELECT COUNT(*) FROM persistent_opens WHERE persistent_id = ?1",
            [persistent_id as i64],
            |r| r.get(0),
        )?;
        if known > 0 {
            for (seq, l) in locks.iter().take(MAX_PERSISTED_LOCKS).enumerate() {
                tx.execute(
                    "INSERT INTO persistent_open_locks(persistent_id, seq, offset, length, exclusive)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        persistent_id as i64,
                        seq as i64,
                        l.offset as i64,
                        l.length as i64,
                        l.exclusive
                    ],
                )?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Forgets a persistent handle.
    pub fn forget_persisted_open(&self, persistent_id: u64) -> DbResult<()> {
        let conn = self.lock();
        conn.execute(
            "DELETE FROM persistent_open_locks WHERE persistent_id = ?1",
            [persistent_id as i64],
        )?;
        conn.execute(
            "DELETE FROM persistent_opens WHERE persistent_id = ?1",
            [persistent_id as i64],
        )?;
        Ok(())
    }

    /// Every recorded persistent handle.
    pub fn persisted_opens(&self) -> DbResult<Vec<PersistedOpen>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT persistent_id, share, path, user_name, client_guid, create_guid, access,
                    share_access, timeout_ms FROM persistent_opens ORDER BY persistent_id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(PersistedOpen {
                persistent_id: r.get::<_, i64>(0)? as u64,
                share: r.get(1)?,
                path: r.get(2)?,
                user: r.get(3)?,
                client_guid: guid(r.get(4)?),
                create_guid: guid(r.get(5)?),
                access: r.get(6)?,
                share_access: r.get(7)?,
                timeout_ms: r.get(8)?,
                locks: Vec::new(),
            })
        })?;
        let mut opens = rows.collect::<Result<Vec<_>, _>>()?;
        let mut stmt = conn.prepare(
            "SELECT offset, length, exclusive FROM persistent_open_locks
             WHERE persistent_id = ?1 ORDER BY seq LIMIT ?2",
        )?;
        for o in &mut opens {
            let locks = stmt.query_map(
                params![o.persistent_id as i64, MAX_PERSISTED_LOCKS as i64],
                |r| {
                    Ok(PersistedLock {
                        offset: r.get::<_, i64>(0)? as u64,
                        length: r.get::<_, i64>(1)? as u64,
                        exclusive: r.get(2)?,
                    })
                },
            )?;
            o.locks = locks.collect::<Result<Vec<_>, _>>()?;
        }
        Ok(opens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistent_opens_are_kept_and_forgotten() {
        let db = Db::open_in_memory().expect("db");
        let o = PersistedOpen {
            persistent_id: u64::MAX - 1,
            create_guid: [7; 16],
            client_guid: [9; 16],
            user: "alice".into(),
            share: "ca".into(),
            path: "dir\\ckpt.bin".into(),
            access: 0x0012_019F,
            share_access: 1,
            timeout_ms: 60_000,
            locks: Vec::new(),
        };
        db.persist_open(&o).expect("persist");
        db.persist_open(&o).expect("persist again replaces");
        assert_eq!(db.persisted_opens().expect("list"), vec![o.clone()]);
        // Locks are kept whole (offsets past i64::MAX too) and replaced as they change.
        let locks = vec![
            PersistedLock {
                offset: u64::MAX - 10,
                length: 10,
                exclusive: true,
            },
            PersistedLock {
                offset: 0,
                length: 0,
                exclusive: false,
            },
        ];
        db.persist_open_locks(o.persistent_id, &locks)
            .expect("locks");
        assert_eq!(db.persisted_opens().expect("list")[0].locks, locks);
        db.persist_open_locks(o.persistent_id, &locks[1..])
            .expect("fewer");
        assert_eq!(db.persisted_opens().expect("list")[0].locks, &locks[1..]);
        db.persist_open_locks(12345, &locks)
            .expect("an unknown handle keeps none");
        db.forget_persisted_open(o.persistent_id).expect("forget");
        assert!(db.persisted_opens().expect("list").is_empty());
    }
}
