//! Persistent SMB handles of continuously available shares, kept so that a restarted
//! `quarry serve` can give each back to its client (the SMB server records and forgets
//! them through its `Backend`). Not audited: they come and go with every such open.

use rusqlite::params;

use quarry_smb::server::durable::PersistedOpen;

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
        Ok(())
    }

    /// Forgets a persistent handle.
    pub fn forget_persisted_open(&self, persistent_id: u64) -> DbResult<()> {
        self.lock().execute(
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
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
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
        };
        db.persist_open(&o).expect("persist");
        db.persist_open(&o).expect("persist again replaces");
        assert_eq!(db.persisted_opens().expect("list"), vec![o.clone()]);
        db.forget_persisted_open(o.persistent_id).expect("forget");
        assert!(db.persisted_opens().expect("list").is_empty());
    }
}
