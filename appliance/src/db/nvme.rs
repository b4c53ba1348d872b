//! NVMe-oF subsystems, their allowed hosts and namespaces.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{now, Actor, Db, DbError, DbResult, Namespace, Subsystem};

/// NQNs are at most 223 bytes (NVMe Base 4.5).
pub const MAX_NQN: usize = 223;
/// The well-known discovery subsystem's NQN; never a configurable subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Highest namespace id we hand out (bounds Identify lists and per-controller state).
pub const MAX_NSID: u32 = 1024;
/// Most allowed hosts per subsystem.
pub const MAX_HOSTS: usize = 1024;

/// Checks an NQN: `nqn.` prefix, printable ASCII without spaces, at most 223 bytes.
pub fn validate_nqn(nqn: &str) -> DbResult<()> {
    let ok = nqn.len() > 4
        && nqn.len() <= MAX_NQN
        && nqn.starts_with("nqn.")
        && nqn.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(DbError::Invalid(format!(
            "NQN must start with 'nqn.', be printable ASCII without spaces and at most {MAX_NQN} bytes"
        )))
    }
}

fn subsystem_id(tx: &rusqlite::Connection, nqn: &str) -> DbResult<i64> {
    tx.query_row(
        "SELECT id FROM nvme_subsystems WHERE nqn = ?1",
        [nqn],
        |r| r.get(0),
    )
    .optional()?
    .ok_or_else(|| DbError::NotFound(format!("subsystem {nqn}")))
}

fn set_hosts(tx: &Transaction<'_>, id: i64, hosts: &[String]) -> DbResult<()> {
    if hosts.len() > MAX_HOSTS {
        return Err(DbError::Invalid(format!(
            "at most {MAX_HOSTS} hosts per subsystem"
        )));
    }
    for h in hosts {
        validate_nqn(h)?;
    }
    tx.execute("DELETE FROM nvme_hosts WHERE subsystem_id = ?1", [id])?;
    for h in hosts {
        tx.execute(
            "INSERT OR IGNORE INTO nvme_hosts(subsystem_id, host_nqn) VALUES (?1, ?2)",
            params![id, h],
        )?;
    }
    Ok(())
}

fn load(conn: &rusqlite::Connection, nqn: &str) -> DbResult<Option<Subsystem>> {
    let row = conn
        .query_row(
            "SELECT id, nqn, serial, allow_any_host, created_at FROM nvme_subsystems WHERE nqn = ?1",
            [nqn],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, bool>(3)?, r.get::<_, i64>(4)?)),
        )
        .optional()?;
    let Some((id, nqn, serial, allow_any_host, created_at)) = row else {
        return Ok(None);
    };
    let hosts = conn
        .prepare("SELECT host_nqn FROM nvme_hosts WHERE subsystem_id = ?1 ORDER BY host_nqn")?
        .query_map([id], |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    let namespaces = conn
        .prepare(
            "SELECT n.nsid, v.name, n.uuid FROM nvme_namespaces n JOIN volumes v ON v.id = n.volume_id
             WHERE n.subsystem_id = ?1 ORDER BY n.nsid",
        )?
        .query_map([id], |r| {
            let uuid: String = r.get(2)?;
            Ok(Namespace {
                nsid: r.get(0)?,
                volume: r.get(1)?,
                uuid: uuid::Uuid::parse_str(&uuid).unwrap_or(uuid::Uuid::nil()),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Subsystem {
        nqn,
        serial,
        allow_any_host,
        hosts,
        namespaces,
        created_at,
    }))
}

impl Db {
    /// Creates a subsystem with a generated serial number.
    pub fn create_subsystem(
        &self,
        actor: &Actor,
        nqn: &str,
        allow_any_host: bool,
        hosts: &[String],
    ) -> DbResult<Subsystem> {
        validate_nqn(nqn)?;
        if nqn == DISCOVERY_NQN {
            return Err(DbError::Invalid("the discovery NQN is reserved".into()));
        }
        let serial: String = uuid::Uuid::new_v4()
            .simple()
            .to_string()
            .chars()
            .take(20)
            .collect();
        let detail = serde_json::json!({ "allow_any_host": allow_any_host, "hosts": hosts });
        self.write(actor, "nvme.subsystem.create", nqn, detail, |tx| {
            tx.execute(
                "INSERT INTO nvme_subsystems(nqn, serial, allow_any_host, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![nqn, serial, allow_any_host, now()],
            )
            .map_err(|e| DbError::from_constraint(e, &format!("subsystem {nqn} already exists")))?;
            set_hosts(tx, tx.last_insert_rowid(), hosts)?;
            load(tx, nqn)?.ok_or_else(|| DbError::NotFound(format!("subsystem {nqn}")))
        })
    }

    /// Changes a subsystem's host access.
    pub fn update_subsystem(
        &self,
        actor: &Actor,
        nqn: &str,
        allow_any_host: Option<bool>,
        hosts: Option<&[String]>,
    ) -> DbResult<Subsystem> {
        let detail = serde_json::json!({ "allow_any_host": allow_any_host, "hosts": hosts });
        self.write(actor, "nvme.subsystem.update", nqn, detail, |tx| {
            let id = subsystem_id(tx, nqn)?;
            if let Some(any) = allow_any_host {
                tx.execute(
                    "UPDATE nvme_subsystems SET allow_any_host = ?1 WHERE id = ?2",
                    params![any, id],
                )?;
            }
            if let Some(hosts) = hosts {
                set_hosts(tx, id, hosts)?;
            }
            load(tx, nqn)?.ok_or_else(|| DbError::NotFound(format!("subsystem {nqn}")))
        })
    }

    /// Deletes a subsystem (its namespaces go with it; volumes stay).
    pub fn delete_subsystem(&self, actor: &Actor, nqn: &str) -> DbResult<()> {
        self.write(
            actor,
            "nvme.subsystem.delete",
            nqn,
            serde_json::json!({}),
            |tx| {
                let id = subsystem_id(tx, nqn)?;
                tx.execute("DELETE FROM nvme_subsystems WHERE id = ?1", [id])?;
                Ok(())
            },
        )
    }

    /// Adds a namespace backed by `volume`; picks the lowest free NSID when none is given.
    pub fn add_namespace(
        &self,
        actor: &Actor,
        nqn: &str,
        volume: &str,
        nsid: Option<u32>,
    ) -> DbResult<Namespace> {
        if let Some(n) = nsid {
            if n == 0 || n > MAX_NSID {
                return Err(DbError::Invalid(format!(
                    "nsid must be between 1 and {MAX_NSID}"
                )));
            }
        }
        let detail = serde_json::json!({ "volume": volume, "nsid": nsid });
        self.write(actor, "nvme.namespace.add", nqn, detail, |tx| {
            let id = subsystem_id(tx, nqn)?;
            let volume_id: i64 = tx
                .query_row("SELECT id FROM volumes WHERE name = ?1", [volume], |r| r.get(0))
                .optional()?
                .ok_or_else(|| DbError::Invalid(format!("unknown volume {volume}")))?;
            let used: Vec<u32> = tx
                .prepare("SELECT nsid FROM nvme_namespaces WHERE subsystem_id = ?1 ORDER BY nsid")?
                .query_map([id], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            let in_use: i64 = tx.query_row(
                "SELECT count(*) FROM nvme_namespaces WHERE subsystem_id = ?1 AND volume_id = ?2",
                [id, volume_id],
                |r| r.get(0),
            )?;
            if in_use > 0 {
                return Err(DbError::Conflict(format!("volume {volume} is already a namespace of {nqn}")));
            }
            let nsid = match nsid {
                Some(n) if used.contains(&n) => return Err(DbError::Conflict(format!("nsid {n} is in use"))),
                Some(n) => n,
                None => (1..=MAX_NSID)
                    .find(|n| !used.contains(n))
                    .ok_or_else(|| DbError::Conflict(format!("{nqn} already has {MAX_NSID} namespaces")))?,
            };
            let uuid = uuid::Uuid::new_v4();
            tx.execute(
                "INSERT INTO nvme_namespaces(subsystem_id, nsid, volume_id, uuid) VALUES (?1, ?2, ?3, ?4)",
                params![id, nsid, volume_id, uuid.to_string()],
            )?;
            Ok(Namespace { nsid, volume: volume.to_string(), uuid })
        })
    }

    /// Removes a namespace.
    pub fn remove_namespace(&self, actor: &Actor, nqn: &str, nsid: u32) -> DbResult<()> {
        self.write(
            actor,
            "nvme.namespace.remove",
            nqn,
            serde_json::json!({ "nsid": nsid }),
            |tx| {
                let id = subsystem_id(tx, nqn)?;
                let n = tx.execute(
                    "DELETE FROM nvme_namespaces WHERE subsystem_id = ?1 AND nsid = ?2",
                    params![id, nsid],
                )?;
                if n == 0 {
                    return Err(DbError::NotFound(format!("namespace {nsid} of {nqn}")));
                }
                Ok(())
            },
        )
    }

    /// One subsystem.
    pub fn subsystem(&self, nqn: &str) -> DbResult<Option<Subsystem>> {
        load(&self.lock(), nqn)
    }

    /// All subsystems with hosts and namespaces.
    pub fn subsystems(&self) -> anyhow::Result<Vec<Subsystem>> {
        Ok(self.list_subsystems()?)
    }

    /// All subsystems, with the database's own error type.
    pub fn list_subsystems(&self) -> DbResult<Vec<Subsystem>> {
        let conn = self.lock();
        let nqns: Vec<String> = conn
            .prepare("SELECT nqn FROM nvme_subsystems ORDER BY nqn")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(nqns.len());
        for nqn in nqns {
            if let Some(s) = load(&conn, &nqn)? {
                out.push(s);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsystem_namespaces_and_hosts() {
        let db = Db::open_in_memory().unwrap();
        let a = Actor::system();
        db.create_volume(&a, "vol1", 1 << 20, || Ok(())).unwrap();
        let nqn = "nqn.2026-01.io.quarry:test";
        db.create_subsystem(
            &a,
            nqn,
            false,
            &["nqn.2014-08.org.nvmexpress:uuid:host1".into()],
        )
        .unwrap();
        assert!(db.create_subsystem(&a, DISCOVERY_NQN, true, &[]).is_err());
        assert!(db.create_subsystem(&a, "bad nqn", true, &[]).is_err());
        let ns = db.add_namespace(&a, nqn, "vol1", None).unwrap();
        assert_eq!(ns.nsid, 1);
        assert!(matches!(
            db.add_namespace(&a, nqn, "vol1", None),
            Err(DbError::Conflict(_))
        ));
        assert!(matches!(
            db.delete_volume(&a, "vol1"),
            Err(DbError::Conflict(_))
        ));
        let s = db.subsystem(nqn).unwrap().unwrap();
        assert_eq!(s.namespaces.len(), 1);
        assert_eq!(s.hosts.len(), 1);
        db.remove_namespace(&a, nqn, 1).unwrap();
        db.delete_volume(&a, "vol1").unwrap();
        db.delete_subsystem(&a, nqn).unwrap();
        assert!(db.subsystems().unwrap().is_empty());
    }
}
