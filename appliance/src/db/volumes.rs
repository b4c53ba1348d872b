//! Block volumes: named, sized, with a stable UUID that NVMe identities derive from.

use rusqlite::{params, OptionalExtension, Row};

use super::shares::DOS_DEVICE_NAMES;
use super::{is_safe_name, now, Actor, Db, DbError, DbResult, Volume};

/// Volume sizes are whole multiples of this (the exported LBA size).
pub const VOLUME_ALIGN: u64 = 4096;
/// Smallest volume.
pub const MIN_VOLUME: u64 = 1 << 20;
/// Largest volume (1 PiB).
pub const MAX_VOLUME: u64 = 1 << 50;
/// Longest volume name.
pub const MAX_VOLUME_NAME: usize = 64;

/// Checks a volume name (same alphabet as shares; it becomes a file name in the pool).
pub fn validate_volume_name(name: &str) -> DbResult<()> {
    let ok = is_safe_name(name, MAX_VOLUME_NAME)
        && !DOS_DEVICE_NAMES.contains(&name.to_ascii_lowercase().split('.').next().unwrap_or(""));
    if ok {
        Ok(())
    } else {
        Err(DbError::Invalid(format!(
            "volume name must be 1-{MAX_VOLUME_NAME} characters of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit"
        )))
    }
}

/// Checks a volume size.
pub fn validate_volume_size(size: u64) -> DbResult<()> {
    if (MIN_VOLUME..=MAX_VOLUME).contains(&size) && size.is_multiple_of(VOLUME_ALIGN) {
        Ok(())
    } else {
        Err(DbError::Invalid(format!(
            "size_bytes must be a multiple of {VOLUME_ALIGN} between {MIN_VOLUME} and {MAX_VOLUME}"
        )))
    }
}

fn volume_from_row(r: &Row<'_>) -> rusqlite::Result<Volume> {
    let uuid: String = r.get(2)?;
    Ok(Volume {
        name: r.get(0)?,
        size_bytes: r.get::<_, i64>(1)?.max(0) as u64,
        uuid: uuid::Uuid::parse_str(&uuid).unwrap_or(uuid::Uuid::nil()),
        created_at: r.get(3)?,
    })
}

const VOLUME_COLUMNS: &str = "name, size_bytes, uuid, created_at";

fn load_volume(conn: &rusqlite::Connection, name: &str) -> DbResult<Option<Volume>> {
    Ok(conn
        .query_row(
            &format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE name = ?1"),
            [name],
            volume_from_row,
        )
        .optional()?)
}

impl Db {
    /// Creates a volume; `prepare` creates its backing store inside the transaction.
    pub fn create_volume(
        &self,
        actor: &Actor,
        name: &str,
        size: u64,
        prepare: impl FnOnce() -> std::io::Result<()>,
    ) -> DbResult<Volume> {
        validate_volume_name(name)?;
        validate_volume_size(size)?;
        self.write(actor, "volume.create", name, serde_json::json!({ "size_bytes": size }), |tx| {
            let t = now();
            let uuid = uuid::Uuid::new_v4();
            tx.execute(
                "INSERT INTO volumes(name, size_bytes, uuid, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)",
                params![name, size as i64, uuid.to_string(), t],
            )
            .map_err(|e| DbError::from_constraint(e, &format!("volume {name} already exists")))?;
            prepare().map_err(|e| DbError::io(format!("creating volume {name}"), e))?;
            Ok(Volume { name: name.to_string(), size_bytes: size, uuid, created_at: t })
        })
    }

    /// Grows a volume. Shrinking is refused: a block volume's data layout is unknown to
    /// the appliance, so any shrink could cut a file system in half.
    pub fn resize_volume(
        &self,
        actor: &Actor,
        name: &str,
        size: u64,
        prepare: impl FnOnce() -> std::io::Result<()>,
    ) -> DbResult<Volume> {
        validate_volume_size(size)?;
        self.write(
            actor,
            "volume.resize",
            name,
            serde_json::json!({ "size_bytes": size }),
            |tx| {
                let vol = load_volume(tx, name)?
                    .ok_or_else(|| DbError::NotFound(format!("volume {name}")))?;
                if size < vol.size_bytes {
                    return Err(DbError::Conflict(format!(
                        "volume {name} is {} bytes; volumes can only grow",
                        vol.size_bytes
                    )));
                }
                tx.execute(
                    "UPDATE volumes SET size_bytes = ?1, updated_at = ?2 WHERE name = ?3",
                    params![size as i64, now(), name],
                )?;
                prepare().map_err(|e| DbError::io(format!("resizing volume {name}"), e))?;
                Ok(Volume {
                    size_bytes: size,
                    ..vol
                })
            },
        )
    }

    /// Deletes a volume record (refused while a namespace exports it).
    pub fn delete_volume(&self, actor: &Actor, name: &str) -> DbResult<Volume> {
        self.write(actor, "volume.delete", name, serde_json::json!({}), |tx| {
            let vol = load_volume(tx, name)?
                .ok_or_else(|| DbError::NotFound(format!("volume {name}")))?;
            tx.execute("DELETE FROM volumes WHERE name = ?1", [name])
                .map_err(|e| {
                    DbError::from_constraint(
                        e,
                        &format!("volume {name} is exported by an NVMe namespace; remove it first"),
                    )
                })?;
            Ok(vol)
        })
    }

    /// One volume.
    pub fn volume(&self, name: &str) -> anyhow::Result<Option<Volume>> {
        Ok(self.find_volume(name)?)
    }

    /// One volume, with the database's own error type.
    pub fn find_volume(&self, name: &str) -> DbResult<Option<Volume>> {
        load_volume(&self.lock(), name)
    }

    /// All volumes.
    pub fn volumes(&self) -> anyhow::Result<Vec<Volume>> {
        Ok(self.list_volumes()?)
    }

    /// All volumes, with the database's own error type.
    pub fn list_volumes(&self) -> DbResult<Vec<Volume>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {VOLUME_COLUMNS} FROM volumes ORDER BY name COLLATE NOCASE"
        ))?;
        let rows = stmt.query_map([], volume_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_lifecycle() {
        let db = Db::open_in_memory().unwrap();
        let a = Actor::system();
        assert!(db.create_volume(&a, "v", 1000, || Ok(())).is_err());
        let v = db.create_volume(&a, "v", 1 << 20, || Ok(())).unwrap();
        assert!(matches!(
            db.resize_volume(&a, "v", 1 << 19, || Ok(())),
            Err(DbError::Invalid(_))
        ));
        assert!(matches!(
            db.resize_volume(&a, "v", (1 << 20) - 4096, || Ok(())),
            Err(DbError::Invalid(_))
        ));
        let v2 = db.resize_volume(&a, "v", 2 << 20, || Ok(())).unwrap();
        assert_eq!(v2.uuid, v.uuid);
        assert_eq!(v2.size_bytes, 2 << 20);
        db.delete_volume(&a, "V").unwrap();
        assert!(db.volume("v").unwrap().is_none());
    }
}
