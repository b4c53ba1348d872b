//! NVMe-oF listeners (ports) added through the API. The command-line listeners are not
//! stored: they are part of how the appliance was started, not of its configuration.

use std::net::IpAddr;

use rusqlite::{params, OptionalExtension};

use super::{now, Actor, Db, DbError, DbResult};

/// Most API-added listeners: each one is a bound socket and an accept task.
pub const MAX_LISTENERS: i64 = 64;

/// A stored listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmeListener {
    /// Row id (the API's `{id}`).
    pub id: i64,
    /// `tcp` (or `rdma`, refused until that transport exists).
    pub transport: String,
    /// Bind address.
    pub address: IpAddr,
    /// Bind port.
    pub port: u16,
    /// Address put in discovery log entries instead of the bind address (for NAT).
    pub advertise: Option<String>,
    /// Unix seconds.
    pub created_at: i64,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, String, String, i64, Option<String>, i64)> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

fn parse(
    (id, transport, address, port, advertise, created_at): (
        i64,
        String,
        String,
        i64,
        Option<String>,
        i64,
    ),
) -> DbResult<NvmeListener> {
    let address = address.parse().map_err(|_| {
        DbError::Invalid(format!(
            "stored listener {id} has a bad address {address:?}"
        ))
    })?;
    let port = u16::try_from(port)
        .map_err(|_| DbError::Invalid(format!("stored listener {id} has a bad port {port}")))?;
    Ok(NvmeListener {
        id,
        transport,
        address,
        port,
        advertise,
        created_at,
    })
}

impl Db {
    /// Stores a listener (audited). The caller has already bound it.
    pub fn create_nvme_listener(
        &self,
        actor: &Actor,
        transport: &str,
        address: IpAddr,
        port: u16,
        advertise: Option<&str>,
    ) -> DbResult<NvmeListener> {
        let target = format!("{transport}://{}", std::net::SocketAddr::new(address, port));
        self.write(actor, "nvme.listener.create", &target, serde_json::json!({"advertise": advertise}), |tx| {
            let count: i64 = tx.query_row("SELECT count(*) FROM nvme_listeners", [], |r| r.get(0))?;
            if count >= MAX_LISTENERS {
                return Err(DbError::Conflict(format!("at most {MAX_LISTENERS} listeners")));
            }
            tx.execute(
                "INSERT INTO nvme_listeners(transport, address, port, advertise, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![transport, address.to_string(), port, advertise, now()],
            )
            .map_err(|e| DbError::from_constraint(e, &format!("listener {target} already exists")))?;
            let id = tx.last_insert_rowid();
            let r = tx.query_row(
                "SELECT id, transport, address, port, advertise, created_at FROM nvme_listeners WHERE id = ?1",
                [id],
                row,
            )?;
            parse(r)
        })
    }

    /// Deletes a listener (audited) and returns what it was.
    pub fn delete_nvme_listener(&self, actor: &Actor, id: i64) -> DbResult<NvmeListener> {
        self.write(actor, "nvme.listener.delete", &id.to_string(), serde_json::json!({}), |tx| {
            let r = tx
                .query_row(
                    "SELECT id, transport, address, port, advertise, created_at FROM nvme_listeners WHERE id = ?1",
                    [id],
                    row,
                )
                .optional()?
                .ok_or_else(|| DbError::NotFound(format!("listener {id}")))?;
            tx.execute("DELETE FROM nvme_listeners WHERE id = ?1", [id])?;
            parse(r)
        })
    }

    /// Every stored listener, oldest first.
    pub fn nvme_listeners(&self) -> DbResult<Vec<NvmeListener>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT id, transport, address, port, advertise, created_at FROM nvme_listeners ORDER BY id",
        )?;
        let rows = stmt.query_map([], row)?;
        rows.map(|r| parse(r?)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_are_stored_unique_and_audited() {
        let db = Db::open_in_memory().unwrap();
        let actor = Actor::system();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let l = db
            .create_nvme_listener(&actor, "tcp", ip, 4421, Some("10.0.2.2"))
            .unwrap();
        assert_eq!(l.port, 4421);
        assert_eq!(l.advertise.as_deref(), Some("10.0.2.2"));
        assert!(matches!(
            db.create_nvme_listener(&actor, "tcp", ip, 4421, None),
            Err(DbError::Conflict(_))
        ));
        assert_eq!(db.nvme_listeners().unwrap(), vec![l.clone()]);
        assert_eq!(db.delete_nvme_listener(&actor, l.id).unwrap(), l);
        assert!(matches!(
            db.delete_nvme_listener(&actor, l.id),
            Err(DbError::NotFound(_))
        ));
        assert!(db.nvme_listeners().unwrap().is_empty());
        let actions: Vec<String> = db
            .audit(10, None)
            .unwrap()
            .into_iter()
            .map(|a| a.action)
            .collect();
        assert_eq!(
            actions,
            vec!["nvme.listener.delete", "nvme.listener.create"]
        );
    }
}
