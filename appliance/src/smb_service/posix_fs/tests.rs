//! Tests of the POSIX share against real directories in temp dirs.

use std::fs;
use std::os::unix::fs::{symlink, OpenOptionsExt};
use std::sync::Arc;

use quarry_smb::vfs::{
    attr, create_options as co, nt, AllocatedRange, BasicInfoChange, CreateAction,
    CreateDisposition as D, CreateRequest, DirEntry, FsError, FsFile, Opened, ShareFs,
};

use super::{PosixShareConfig, PosixShareFs};
use crate::pool::ShareQuota;

struct Fixture {
    _outer: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
    quota: Arc<ShareQuota>,
    fs: PosixShareFs,
}

fn fixture_with(limit: Option<u64>, read_only: bool) -> Fixture {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("share");
    let outside = outer.path().join("outside");
    fs::create_dir(&root).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), b"top secret").unwrap();
    let quota = Arc::new(ShareQuota::new(limit, 0));
    let fs = PosixShareFs::open(
        &root,
        quota.clone(),
        PosixShareConfig {
            label: "data".into(),
            read_only,
        },
    )
    .unwrap();
    Fixture {
        _outer: outer,
        root,
        outside,
        quota,
        fs,
    }
}

fn fixture() -> Fixture {
    fixture_with(None, false)
}

fn req(path: &str, disposition: D) -> CreateRequest<'_> {
    CreateRequest {
        path,
        disposition,
        options: 0,
        attributes: 0,
        write: true,
        read: true,
        allocation_size: 0,
        stream: None,
        security: None,
    }
}

fn open(fx: &Fixture, path: &str, disposition: D) -> Result<Opened, u32> {
    fx.fs
        .create(&req(path, disposition))
        .map_err(|e| e.nt_status())
}

/// Opens the existing `path` for reading only (the way a reader's open asks).
fn open_to_read(fx: &Fixture, path: &str) -> Opened {
    fx.fs
        .create(&CreateRequest {
            write: false,
            ..req(path, D::Open)
        })
        .unwrap()
}

fn mkdir(fx: &Fixture, path: &str) -> Opened {
    fx.fs
        .create(&CreateRequest {
            options: co::DIRECTORY_FILE,
            ..req(path, D::Create)
        })
        .unwrap()
}

fn list(file: &dyn FsFile, pattern: &str) -> Vec<String> {
    let mut c = file.list_dir(pattern).unwrap();
    let mut names = Vec::new();
    while let Some(e) = c.next_entry().unwrap() {
        names.push(e.name);
    }
    names
}

#[test]
fn create_dispositions_follow_nt_semantics() {
    let fx = fixture();
    assert_eq!(
        open(&fx, "a.txt", D::Open).unwrap_err(),
        nt::OBJECT_NAME_NOT_FOUND
    );
    assert_eq!(
        open(&fx, "a.txt", D::Overwrite).unwrap_err(),
        nt::OBJECT_NAME_NOT_FOUND
    );
    let o = open(&fx, "a.txt", D::Create).unwrap();
    assert_eq!(o.action, CreateAction::Created);
    assert_eq!(o.info.attributes, attr::ARCHIVE);
    assert!(!o.info.is_dir);
    o.file.write_at(0, b"hello", false).unwrap();
    assert_eq!(
        open(&fx, "a.txt", D::Create).unwrap_err(),
        nt::OBJECT_NAME_COLLISION
    );
    let o = open(&fx, "a.txt", D::OpenIf).unwrap();
    assert_eq!((o.action, o.info.end_of_file), (CreateAction::Opened, 5));
    let o = open(&fx, "a.txt", D::OverwriteIf).unwrap();
    assert_eq!(
        (o.action, o.info.end_of_file),
        (CreateAction::Overwritten, 0)
    );
    o.file.write_at(0, b"again", false).unwrap();
    let o = open(&fx, "a.txt", D::Supersede).unwrap();
    assert_eq!(
        (o.action, o.info.end_of_file),
        (CreateAction::Superseded, 0)
    );
    let o = open(&fx, "b.txt", D::OverwriteIf).unwrap();
    assert_eq!(o.action, CreateAction::Created);
    assert_eq!(fx.quota.used(), 0);
}

#[test]
fn directory_and_non_directory_options_are_checked() {
    let fx = fixture();
    let d = mkdir(&fx, "dir");
    assert!(d.info.is_dir);
    assert_eq!(d.info.attributes, attr::DIRECTORY);
    assert!(fx.root.join("dir").is_dir());
    open(&fx, "file", D::Create).unwrap();
    let non_dir = CreateRequest {
        options: co::NON_DIRECTORY_FILE,
        ..req("dir", D::Open)
    };
    assert_eq!(
        fx.fs.create(&non_dir).unwrap_err().nt_status(),
        nt::FILE_IS_A_DIRECTORY
    );
    let dir_req = CreateRequest {
        options: co::DIRECTORY_FILE,
        ..req("file", D::Open)
    };
    assert_eq!(
        fx.fs.create(&dir_req).unwrap_err().nt_status(),
        nt::NOT_A_DIRECTORY
    );
    let bad = CreateRequest {
        options: co::DIRECTORY_FILE,
        ..req("d2", D::OverwriteIf)
    };
    assert_eq!(
        fx.fs.create(&bad).unwrap_err().nt_status(),
        nt::INVALID_PARAMETER
    );
    // A plain open of a directory (no options) works, even when asking for write access.
    let o = open(&fx, "dir", D::Open).unwrap();
    assert!(o.info.is_dir);
    assert_eq!(
        o.file.write_at(0, b"x", false).unwrap_err().nt_status(),
        nt::FILE_IS_A_DIRECTORY
    );
    // Missing parent.
    assert_eq!(
        open(&fx, "nope\\x", D::Create).unwrap_err(),
        nt::OBJECT_PATH_NOT_FOUND
    );
    assert_eq!(
        open(&fx, "file\\x", D::Create).unwrap_err(),
        nt::OBJECT_PATH_NOT_FOUND
    );
    // The share root.
    let root = open(&fx, "", D::Open).unwrap();
    assert!(root.info.is_dir);
    assert_eq!(
        root.file.check_deletable().unwrap_err().nt_status(),
        nt::CANNOT_DELETE
    );
}

#[test]
fn escapes_are_refused() {
    let fx = fixture();
    // Syntax the name rules refuse.
    assert_eq!(
        open(&fx, "..\\outside\\secret", D::Open).unwrap_err(),
        nt::OBJECT_PATH_SYNTAX_BAD
    );
    assert_eq!(
        open(&fx, "a\\..\\..\\outside", D::Open).unwrap_err(),
        nt::OBJECT_PATH_SYNTAX_BAD
    );
    assert_eq!(
        open(&fx, "\\etc\\passwd", D::Open).unwrap_err(),
        nt::INVALID_PARAMETER
    );
    assert_eq!(
        open(&fx, "secret:stream", D::Create).unwrap_err(),
        nt::OBJECT_NAME_INVALID
    );
    // Symlinks inside the share that point out of it.
    symlink(fx.outside.join("secret"), fx.root.join("abs_link")).unwrap();
    symlink("../outside/secret", fx.root.join("rel_link")).unwrap();
    symlink("../outside", fx.root.join("dir_link")).unwrap();
    assert_eq!(
        open(&fx, "abs_link", D::Open).unwrap_err(),
        nt::ACCESS_DENIED
    );
    assert_eq!(
        open(&fx, "rel_link", D::Open).unwrap_err(),
        nt::ACCESS_DENIED
    );
    assert_eq!(
        open(&fx, "dir_link\\secret", D::Open).unwrap_err(),
        nt::ACCESS_DENIED
    );
    assert_eq!(
        open(&fx, "dir_link\\new", D::Create).unwrap_err(),
        nt::ACCESS_DENIED
    );
    assert!(!fx.outside.join("new").exists());
    // Overwriting through a link out of the share must not touch the target.
    assert_eq!(
        open(&fx, "rel_link", D::OverwriteIf).unwrap_err(),
        nt::ACCESS_DENIED
    );
    assert_eq!(fs::read(fx.outside.join("secret")).unwrap(), b"top secret");
    // A symlink that stays inside the share is followed.
    fs::create_dir(fx.root.join("real")).unwrap();
    fs::write(fx.root.join("real/f"), b"inside").unwrap();
    symlink("real/f", fx.root.join("inner_link")).unwrap();
    let o = open(&fx, "inner_link", D::Open).unwrap();
    let mut buf = [0u8; 16];
    let n = o.file.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"inside");
    // Listings hide escaping links.
    let root = open(&fx, "", D::Open).unwrap();
    let names = list(root.file.as_ref(), "*");
    assert!(names.contains(&"inner_link".to_string()));
    for hidden in ["abs_link", "rel_link", "dir_link"] {
        assert!(!names.contains(&hidden.to_string()), "{hidden} listed");
    }
}

#[test]
fn reserved_and_illegal_names_are_refused() {
    let fx = fixture();
    for bad in [
        "CON", "nul.txt", "com1", "LPT9.log", "a*b", "a?b", "a|b", "a<b", "a>b", "a\"b", "a:b",
    ] {
        assert_eq!(
            open(&fx, bad, D::Create).unwrap_err(),
            nt::OBJECT_NAME_INVALID,
            "{bad}"
        );
    }
    assert_eq!(fs::read_dir(&fx.root).unwrap().count(), 0);
}

#[test]
fn lookup_is_case_insensitive_and_cached_names_follow_changes() {
    let fx = fixture();
    mkdir(&fx, "Docs");
    let o = open(&fx, "Docs\\ReadMe.TXT", D::Create).unwrap();
    o.file.write_at(0, b"x", false).unwrap();
    let o = open(&fx, "docs\\README.txt", D::Open).unwrap();
    assert_eq!(o.info.end_of_file, 1);
    assert_eq!(o.file.path(), "Docs\\ReadMe.TXT");
    // Creating a case variant opens the existing file instead of making a second one.
    assert_eq!(
        open(&fx, "DOCS\\readme.txt", D::Create).unwrap_err(),
        nt::OBJECT_NAME_COLLISION
    );
    assert_eq!(
        open(&fx, "DOCS\\readme.txt", D::OpenIf).unwrap().action,
        CreateAction::Opened
    );
    assert_eq!(fs::read_dir(fx.root.join("Docs")).unwrap().count(), 1);
    // Rename changes the case; the old spelling keeps working case-insensitively.
    o.file.rename("docs\\readme.md", false).unwrap();
    assert!(fx.root.join("Docs/readme.md").exists());
    assert_eq!(o.file.path(), "Docs\\readme.md");
    assert_eq!(
        open(&fx, "DOCS\\README.TXT", D::Open).unwrap_err(),
        nt::OBJECT_NAME_NOT_FOUND
    );
    assert_eq!(
        open(&fx, "DOCS\\README.MD", D::Open)
            .unwrap()
            .info
            .end_of_file,
        1
    );
    // A change made behind the share's back is seen (directory mtime moved).
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(fx.root.join("Docs/Other.bin"), b"12").unwrap();
    assert_eq!(
        open(&fx, "docs\\OTHER.BIN", D::Open)
            .unwrap()
            .info
            .end_of_file,
        2
    );
    // Delete, then the name is gone for every spelling.
    let o = open(&fx, "docs\\other.bin", D::Open).unwrap();
    o.file.check_deletable().unwrap();
    o.file.unlink().unwrap();
    assert_eq!(
        open(&fx, "Docs\\Other.bin", D::Open).unwrap_err(),
        nt::OBJECT_NAME_NOT_FOUND
    );
}

#[test]
fn a_create_collides_with_an_existing_name_before_any_refusal() {
    for read_only in [false, true] {
        let fx = fixture_with(None, read_only);
        fs::create_dir(fx.root.join("Docs")).unwrap();
        fs::write(fx.root.join("Docs/ReadMe.txt"), b"x").unwrap();
        symlink("nowhere", fx.root.join("Docs/dangling")).unwrap();
        let refused = |path| CreateRequest {
            options: co::DELETE_ON_CLOSE | co::NON_DIRECTORY_FILE,
            attributes: attr::READONLY,
            ..req(path, D::Create)
        };
        for path in ["Docs\\ReadMe.txt", "docs\\README.TXT", "Docs\\dangling"] {
            assert_eq!(
                fx.fs.create(&refused(path)).unwrap_err().nt_status(),
                nt::OBJECT_NAME_COLLISION,
                "{path}, read-only share: {read_only}"
            );
        }
        let new_name = fx.fs.create(&refused("Docs\\new")).unwrap_err();
        let expected = if read_only {
            nt::ACCESS_DENIED
        } else {
            nt::CANNOT_DELETE
        };
        assert_eq!(new_name.nt_status(), expected, "read-only: {read_only}");
    }
}

#[test]
fn a_name_made_outside_collides_though_the_directory_looks_unchanged() {
    let fx = fixture();
    mkdir(&fx, "d");
    // The name cache now knows `d` as of its mtime.
    open(&fx, "d\\first", D::Create).unwrap();
    assert_eq!(
        open(&fx, "d\\x", D::Create).unwrap().action,
        CreateAction::Created
    );
    let dir = fx.root.join("d");
    let seen = fs::metadata(&dir).unwrap().modified().unwrap();
    fs::write(dir.join("y"), b"1").unwrap();
    fs::File::open(&dir)
        .unwrap()
        .set_times(fs::FileTimes::new().set_modified(seen))
        .unwrap();
    assert_eq!(
        open(&fx, "d\\y", D::Create).unwrap_err(),
        nt::OBJECT_NAME_COLLISION
    );
    let o = open(&fx, "d\\y", D::OverwriteIf).unwrap();
    assert_eq!(o.action, CreateAction::Overwritten);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 3);
}

#[test]
fn nested_paths_resolve_whether_spelled_as_stored_or_not() {
    let fx = fixture();
    mkdir(&fx, "Data");
    mkdir(&fx, "Data\\Train");
    open(&fx, "Data\\Train\\a.bin", D::Create).unwrap();
    // As stored (the one-call path), and with either component in another case (the walk).
    for spelled in [
        "Data\\Train\\a.bin",
        "data\\Train\\a.bin",
        "Data\\TRAIN\\a.bin",
        "DATA\\train\\A.BIN",
    ] {
        let o = open(&fx, spelled, D::Open).unwrap();
        assert_eq!(o.file.path(), "Data\\Train\\a.bin", "{spelled}");
    }
    // A create under a case variant lands in the stored directory.
    open(&fx, "DATA\\train\\b.bin", D::Create).unwrap();
    assert!(fx.root.join("Data/Train/b.bin").exists());
    // Missing or non-directory intermediates are a path, not a name, not found.
    for bad in [
        "Data\\Nope\\a.bin",
        "Data\\Train\\a.bin\\x",
        "nope\\train\\a.bin",
    ] {
        assert_eq!(
            open(&fx, bad, D::Open).unwrap_err(),
            nt::OBJECT_PATH_NOT_FOUND,
            "{bad}"
        );
    }
}

#[test]
fn rename_rules() {
    let fx = fixture();
    let a = open(&fx, "a", D::Create).unwrap();
    a.file.write_at(0, &[1u8; 10], false).unwrap();
    let b = open(&fx, "B", D::Create).unwrap();
    b.file.write_at(0, &[2u8; 30], false).unwrap();
    assert_eq!(fx.quota.used(), 40);
    assert_eq!(
        a.file.rename("b", false).unwrap_err().nt_status(),
        nt::OBJECT_NAME_COLLISION
    );
    a.file.rename("b", true).unwrap();
    // The replaced file's bytes are released; the new name has the requested spelling.
    assert_eq!(fx.quota.used(), 10);
    let names: Vec<_> = fs::read_dir(&fx.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["b".to_string()]);
    mkdir(&fx, "d1");
    let d2 = mkdir(&fx, "d2");
    assert_eq!(
        a.file.rename("d1", true).unwrap_err().nt_status(),
        nt::ACCESS_DENIED
    );
    d2.file.rename("d1\\inner", false).unwrap();
    assert!(fx.root.join("d1/inner").is_dir());
    assert_eq!(
        a.file.rename("missing\\x", false).unwrap_err().nt_status(),
        nt::OBJECT_PATH_NOT_FOUND
    );
    assert_eq!(
        a.file.rename("..\\x", false).unwrap_err().nt_status(),
        nt::OBJECT_PATH_SYNTAX_BAD
    );
}

#[test]
fn delete_rules() {
    let fx = fixture();
    let d = mkdir(&fx, "d");
    let f = open(&fx, "d\\f", D::Create).unwrap();
    f.file.write_at(0, &[0u8; 100], false).unwrap();
    assert_eq!(
        d.file.check_deletable().unwrap_err().nt_status(),
        nt::DIRECTORY_NOT_EMPTY
    );
    assert_eq!(
        d.file.unlink().unwrap_err().nt_status(),
        nt::DIRECTORY_NOT_EMPTY
    );
    f.file
        .set_basic_info(&BasicInfoChange {
            attributes: Some(attr::READONLY),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        f.file.check_deletable().unwrap_err().nt_status(),
        nt::CANNOT_DELETE
    );
    assert_eq!(open(&fx, "d\\f", D::Open).unwrap_err(), nt::ACCESS_DENIED);
    f.file
        .set_basic_info(&BasicInfoChange {
            attributes: Some(attr::NORMAL),
            ..Default::default()
        })
        .unwrap();
    f.file.check_deletable().unwrap();
    f.file.unlink().unwrap();
    assert_eq!(fx.quota.used(), 0);
    d.file.check_deletable().unwrap();
    d.file.unlink().unwrap();
    assert!(!fx.root.join("d").exists());
}

#[test]
fn a_new_file_or_directory_is_described_as_a_later_reading_describes_it() {
    let fx = fixture();
    let cases = [
        (0, 0),
        (attr::NORMAL, 0),
        (attr::ARCHIVE, 0),
        (attr::HIDDEN | attr::SYSTEM, 0),
        (attr::READONLY, 0),
        (attr::HIDDEN, co::DIRECTORY_FILE),
        (0, co::DIRECTORY_FILE),
    ];
    for (i, (attributes, options)) in cases.into_iter().enumerate() {
        let name = format!("new{i}");
        let o = fx
            .fs
            .create(&CreateRequest {
                attributes,
                options,
                ..req(&name, D::Create)
            })
            .unwrap();
        let reread = open_to_read(&fx, &name);
        assert_eq!(o.info, reread.info, "attributes {attributes:#x}");
        assert_eq!(o.info, o.file.info().unwrap(), "attributes {attributes:#x}");
    }
}

#[test]
fn attributes_and_times_persist_in_xattrs() {
    let fx = fixture();
    let o = fx
        .fs
        .create(&CreateRequest {
            attributes: attr::HIDDEN | attr::SYSTEM,
            ..req("h", D::Create)
        })
        .unwrap();
    assert_eq!(
        o.info.attributes,
        attr::HIDDEN | attr::SYSTEM | attr::ARCHIVE
    );
    let ct = 130_000_000_000_000_000u64; // 2012
    let wt = 131_000_000_000_000_000u64;
    o.file
        .set_basic_info(&BasicInfoChange {
            creation_time: Some(ct),
            last_write_time: Some(wt),
            attributes: Some(attr::READONLY),
            ..Default::default()
        })
        .unwrap();
    drop(o);
    let again = open_to_read(&fx, "h");
    assert_eq!(again.info.creation_time, ct);
    assert_eq!(again.info.last_write_time, wt);
    assert_eq!(again.info.attributes, attr::READONLY);
    assert!(again.info.file_id != 0);
    assert_eq!(again.info.nlink, 1);
    // The id is the inode: stable across opens and renames.
    let id = again.info.file_id;
    again.file.rename("h2", false).unwrap();
    assert_eq!(open_to_read(&fx, "H2").info.file_id, id);
}

#[test]
fn quota_is_charged_before_growth_and_released_on_shrink() {
    let fx = fixture_with(Some(1000), false);
    let o = open(&fx, "f", D::Create).unwrap();
    o.file.write_at(0, &[7u8; 600], false).unwrap();
    assert_eq!(fx.quota.used(), 600);
    // In-place rewrite costs nothing.
    o.file.write_at(0, &[8u8; 600], false).unwrap();
    assert_eq!(fx.quota.used(), 600);
    // A write that would pass the quota fails whole: nothing of it lands.
    let err = o.file.write_at(500, &[9u8; 600], false).unwrap_err();
    assert_eq!(err.nt_status(), nt::DISK_FULL);
    assert_eq!(fx.quota.used(), 600);
    assert_eq!(fs::read(fx.root.join("f")).unwrap(), vec![8u8; 600]);
    // Up to the limit exactly is fine.
    o.file.write_at(600, &[1u8; 400], false).unwrap();
    assert_eq!(fx.quota.used(), 1000);
    assert_eq!(
        open(&fx, "g", D::Create)
            .unwrap()
            .file
            .write_at(0, b"x", false)
            .unwrap_err()
            .nt_status(),
        nt::DISK_FULL
    );
    // set_end_of_file grows only within the quota; shrinking releases.
    assert_eq!(
        o.file.set_end_of_file(1001).unwrap_err().nt_status(),
        nt::DISK_FULL
    );
    o.file.set_end_of_file(100).unwrap();
    assert_eq!(fx.quota.used(), 100);
    o.file.set_allocation_size(50).unwrap();
    assert_eq!(
        (fx.quota.used(), o.file.info().unwrap().end_of_file),
        (50, 50)
    );
    o.file.set_allocation_size(5000).unwrap();
    assert_eq!(o.file.info().unwrap().end_of_file, 50);
    // Overwrite releases the old size; delete releases the rest.
    let g = open(&fx, "g", D::Open).unwrap();
    g.file.write_at(0, &[0u8; 200], false).unwrap();
    assert_eq!(fx.quota.used(), 250);
    open(&fx, "f", D::OverwriteIf).unwrap();
    assert_eq!(fx.quota.used(), 200);
    g.file.unlink().unwrap();
    assert_eq!(fx.quota.used(), 0);
    // The quota is the volume size the client sees.
    let info = fx.fs.fs_info().unwrap();
    assert_eq!((info.total_bytes, info.free_bytes), (1000, 1000));
    assert_eq!(info.label, "data");
    assert_eq!(info.fs_name, "NTFS");
}

#[test]
fn concurrent_extending_writes_charge_each_byte_once() {
    let fx = fixture_with(Some(1 << 20), false);
    let files: Vec<Opened> = (0..4)
        .map(|_| open(&fx, "shared", D::OpenIf).unwrap())
        .collect();
    std::thread::scope(|s| {
        for (i, f) in files.iter().enumerate() {
            s.spawn(move || {
                for k in 0..64u64 {
                    let off = (k * 4 + i as u64) * 1024;
                    f.file.write_at(off, &[i as u8; 1024], false).unwrap();
                }
            });
        }
    });
    assert_eq!(
        fs::metadata(fx.root.join("shared")).unwrap().len(),
        256 * 1024
    );
    assert_eq!(fx.quota.used(), 256 * 1024);
}

#[test]
fn writes_charge_growth_from_the_size_on_disk_whatever_the_share_last_saw() {
    let fx = fixture_with(Some(1 << 20), false);
    let o = open(&fx, "f", D::Create).unwrap();
    o.file.write_at(0, &[1u8; 100], false).unwrap();
    assert_eq!(fx.quota.used(), 100);
    let path = fx.root.join("f");
    let outside = fs::OpenOptions::new().write(true).open(&path).unwrap();
    // Cut short behind the share's back: a write inside the size last seen extends.
    outside.set_len(10).unwrap();
    o.file.write_at(0, &[2u8; 50], false).unwrap();
    assert_eq!(fs::read(&path).unwrap(), vec![2u8; 50]);
    assert_eq!(fx.quota.used(), 140, "the 40 bytes past the cut are growth");
    // Grown behind its back: a write beyond the size last seen lands in place.
    outside.set_len(1000).unwrap();
    o.file.write_at(500, &[3u8; 100], false).unwrap();
    let data = fs::read(&path).unwrap();
    assert_eq!(data.len(), 1000);
    assert_eq!(&data[500..600], &[3u8; 100][..]);
    assert_eq!(fx.quota.used(), 140, "nothing grew");
    // Another open of the file sees the size as it is now.
    let other = open(&fx, "f", D::Open).unwrap();
    other.file.write_at(990, &[4u8; 20], false).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), 1010);
    assert_eq!(fx.quota.used(), 150);
}

#[test]
fn fs_info_without_quota_reports_the_disk() {
    let fx = fixture();
    let info = fx.fs.fs_info().unwrap();
    assert!(info.total_bytes > 0 && info.free_bytes <= info.total_bytes);
    assert_eq!(info.bytes_per_sector, 512);
    assert!(info.sectors_per_unit >= 1);
    assert_eq!(info.serial, fx.fs.fs_info().unwrap().serial);
}

#[test]
fn listing_with_wildcards() {
    let fx = fixture();
    for n in ["alpha.txt", "Beta.TXT", "gamma.bin", "noext"] {
        open(&fx, n, D::Create).unwrap();
    }
    mkdir(&fx, "sub");
    let root = open(&fx, "", D::Open).unwrap();
    let mut all = list(root.file.as_ref(), "*");
    assert_eq!(&all[..2], &[".".to_string(), "..".to_string()]);
    all.sort();
    assert_eq!(
        all,
        vec![
            ".",
            "..",
            "Beta.TXT",
            "alpha.txt",
            "gamma.bin",
            "noext",
            "sub"
        ]
    );
    let mut txt = list(root.file.as_ref(), "*.txt");
    txt.sort();
    assert_eq!(txt, vec!["Beta.TXT", "alpha.txt"]);
    // "*.*" as clients send it.
    assert_eq!(list(root.file.as_ref(), "<\"*").len(), 7);
    assert_eq!(list(root.file.as_ref(), "?????.bin"), vec!["gamma.bin"]);
    // A literal pattern is a case-insensitive lookup.
    assert_eq!(list(root.file.as_ref(), "BETA.txt"), vec!["Beta.TXT"]);
    assert!(list(root.file.as_ref(), "missing").is_empty());
    // Entries carry their metadata.
    let mut c = root.file.list_dir("sub").unwrap();
    let DirEntry { info, .. } = c.next_entry().unwrap().unwrap();
    assert!(info.is_dir);
    // Files are not directories.
    let f = open(&fx, "noext", D::Open).unwrap();
    assert_eq!(
        f.file.list_dir("*").err().map(|e| e.nt_status()),
        Some(nt::NOT_A_DIRECTORY)
    );
}

#[test]
fn large_directory_streams_in_chunks_with_push_back_and_restart() {
    let fx = fixture();
    mkdir(&fx, "big");
    const N: usize = 5000;
    for i in 0..N {
        fs::write(fx.root.join(format!("big/file{i:05}")), b"").unwrap();
    }
    let d = open(&fx, "big", D::Open).unwrap();
    let mut c = d.file.list_dir("file*").unwrap();
    let mut seen = std::collections::HashSet::new();
    // Pull in "responses" of 97 entries, pushing back the 98th as a full buffer would.
    loop {
        let mut got = 0;
        let mut end = false;
        while got < 97 {
            match c.next_entry().unwrap() {
                Some(e) => {
                    assert!(seen.insert(e.name.clone()), "duplicate {}", e.name);
                    got += 1;
                }
                None => {
                    end = true;
                    break;
                }
            }
        }
        if end {
            break;
        }
        if let Some(e) = c.next_entry().unwrap() {
            c.unread(e);
        } else {
            break;
        }
    }
    assert_eq!(seen.len(), N);
    c.restart().unwrap();
    let mut again = 0;
    while c.next_entry().unwrap().is_some() {
        again += 1;
    }
    assert_eq!(again, N);
    // Case-insensitive lookup in the big directory.
    assert_eq!(
        open(&fx, "BIG\\FILE04999", D::Open)
            .unwrap()
            .info
            .end_of_file,
        0
    );
}

#[test]
fn sparse_zero_data_and_allocated_ranges() {
    let fx = fixture();
    let o = open(&fx, "sparse", D::Create).unwrap();
    o.file.set_sparse(true).unwrap();
    assert_ne!(o.file.info().unwrap().attributes & attr::SPARSE_FILE, 0);
    const MIB: u64 = 1 << 20;
    o.file.write_at(0, &vec![1u8; MIB as usize], false).unwrap();
    o.file
        .write_at(4 * MIB, &vec![2u8; MIB as usize], false)
        .unwrap();
    let (ranges, more) = o.file.allocated_ranges(0, 5 * MIB, 16).unwrap();
    assert!(!more);
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(
        (ranges[0].offset, ranges[1].offset + ranges[1].length),
        (0, 5 * MIB)
    );
    let (one, more) = o.file.allocated_ranges(0, 5 * MIB, 1).unwrap();
    assert_eq!((one.len(), more), (1, true));
    o.file.zero_data(0, MIB).unwrap();
    let mut buf = vec![9u8; 16];
    o.file.read_at(0, &mut buf).unwrap();
    assert_eq!(buf, vec![0u8; 16]);
    let (ranges, _) = o.file.allocated_ranges(0, 5 * MIB, 16).unwrap();
    assert_eq!(ranges.len(), 1);
    assert_eq!(o.file.info().unwrap().end_of_file, 5 * MIB);
    o.file.set_sparse(false).unwrap();
    assert_eq!(o.file.info().unwrap().attributes & attr::SPARSE_FILE, 0);
    let (ranges, _) = o.file.allocated_ranges(0, 5 * MIB, 16).unwrap();
    assert_eq!(
        ranges,
        vec![AllocatedRange {
            offset: 0,
            length: 5 * MIB
        }],
        "a file that is not sparse is allocated throughout"
    );
    use std::os::unix::fs::MetadataExt;
    let allocated = || std::fs::metadata(fx.root.join("sparse")).unwrap().blocks();
    let before = allocated();
    o.file.zero_data(4 * MIB, MIB).unwrap();
    assert_eq!(
        allocated(),
        before,
        "zeroing a non-sparse file keeps its blocks"
    );
    o.file.read_at(4 * MIB, &mut buf).unwrap();
    assert_eq!(buf, vec![0u8; 16]);
}

#[test]
fn read_only_share_refuses_changes() {
    let fx = fixture_with(None, true);
    fs::write(fx.root.join("f"), b"data").unwrap();
    assert_eq!(open(&fx, "new", D::Create).unwrap_err(), nt::ACCESS_DENIED);
    assert_eq!(open(&fx, "f", D::Open).unwrap_err(), nt::ACCESS_DENIED);
    let o = open_to_read(&fx, "f");
    let mut buf = [0u8; 8];
    assert_eq!(o.file.read_at(0, &mut buf).unwrap(), 4);
    assert_eq!(
        o.file.write_at(0, b"x", false).unwrap_err().nt_status(),
        nt::ACCESS_DENIED
    );
    assert_eq!(o.file.unlink().unwrap_err().nt_status(), nt::ACCESS_DENIED);
    assert_eq!(
        o.file.rename("g", false).unwrap_err().nt_status(),
        nt::ACCESS_DENIED
    );
}

#[test]
fn read_write_flush_round_trip() {
    let fx = fixture();
    let o = fx
        .fs
        .create(&CreateRequest {
            options: co::WRITE_THROUGH,
            ..req("data.bin", D::Create)
        })
        .unwrap();
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(o.file.write_at(0, &payload, true).unwrap(), payload.len());
    o.file.flush().unwrap();
    let mut back = vec![0u8; payload.len() + 10];
    assert_eq!(o.file.read_at(0, &mut back).unwrap(), payload.len());
    assert_eq!(&back[..payload.len()], &payload[..]);
    assert_eq!(o.file.read_at(1 << 40, &mut back).unwrap(), 0);
    let ro = open_to_read(&fx, "data.bin");
    assert_eq!(
        ro.file.write_at(0, b"x", false).unwrap_err().nt_status(),
        nt::ACCESS_DENIED
    );
    assert_eq!(ro.info.end_of_file, payload.len() as u64);
}

#[test]
fn opens_follow_renames_of_their_parent_directories() {
    let fx = fixture();
    let d = mkdir(&fx, "old");
    let f = open(&fx, "old\\f.txt", D::Create).unwrap();
    f.file.write_at(0, b"abc", false).unwrap();
    d.file.rename("new", false).unwrap();
    assert_eq!(f.file.path(), "new\\f.txt");
    // Behind the share's back too.
    fs::rename(fx.root.join("new"), fx.root.join("newer")).unwrap();
    assert_eq!(f.file.path(), "newer\\f.txt");
    f.file.rename("newer\\g.txt", false).unwrap();
    assert!(fx.root.join("newer/g.txt").exists());
    f.file.unlink().unwrap();
    assert!(!fx.root.join("newer/g.txt").exists());
    assert_eq!(fx.quota.used(), 0);
}

#[test]
fn windows_attribute_rules() {
    let fx = fixture();
    // No temporary directories.
    let tmp_dir = CreateRequest {
        options: co::DIRECTORY_FILE,
        attributes: attr::TEMPORARY,
        ..req("t", D::Create)
    };
    assert_eq!(
        fx.fs.create(&tmp_dir).unwrap_err().nt_status(),
        nt::INVALID_PARAMETER
    );
    let d = mkdir(&fx, "d");
    let set = |a| BasicInfoChange {
        attributes: Some(a),
        ..Default::default()
    };
    assert_eq!(
        d.file
            .set_basic_info(&set(attr::TEMPORARY))
            .unwrap_err()
            .nt_status(),
        nt::INVALID_PARAMETER
    );
    d.file
        .set_basic_info(&set(attr::DIRECTORY | attr::HIDDEN))
        .unwrap();
    assert_eq!(
        d.file.info().unwrap().attributes,
        attr::DIRECTORY | attr::HIDDEN
    );
    // A file cannot be made a directory.
    let f = open(&fx, "f", D::Create).unwrap();
    assert_eq!(
        f.file
            .set_basic_info(&set(attr::DIRECTORY))
            .unwrap_err()
            .nt_status(),
        nt::INVALID_PARAMETER
    );
    // Overwriting a hidden file must ask for HIDDEN.
    f.file.set_basic_info(&set(attr::HIDDEN)).unwrap();
    assert_eq!(
        open(&fx, "f", D::OverwriteIf).unwrap_err(),
        nt::ACCESS_DENIED
    );
    let keep = CreateRequest {
        attributes: attr::HIDDEN,
        ..req("f", D::OverwriteIf)
    };
    assert_eq!(
        fx.fs.create(&keep).unwrap().info.attributes,
        attr::HIDDEN | attr::ARCHIVE
    );
    // A read-only file may be created with write access, and written through that open.
    let ro = CreateRequest {
        attributes: attr::READONLY,
        ..req("ro", D::Create)
    };
    let o = fx.fs.create(&ro).unwrap();
    assert_eq!(o.info.attributes, attr::READONLY | attr::ARCHIVE);
    o.file.write_at(0, b"x", false).unwrap();
    assert_eq!(open(&fx, "ro", D::Open).unwrap_err(), nt::ACCESS_DENIED);
    let attrs_only = CreateRequest {
        write: false,
        read: false,
        ..req("ro", D::Open)
    };
    fx.fs.create(&attrs_only).unwrap();
}

#[test]
fn racing_creates_of_one_directory_both_succeed() {
    let fx = fixture();
    let actions: Vec<CreateAction> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let r = CreateRequest {
                        options: co::DIRECTORY_FILE,
                        ..req("dup", D::OpenIf)
                    };
                    fx.fs.create(&r).unwrap().action
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        actions
            .iter()
            .filter(|a| **a == CreateAction::Created)
            .count(),
        1
    );
    assert_eq!(
        actions
            .iter()
            .filter(|a| **a == CreateAction::Opened)
            .count(),
        3
    );
}

#[test]
fn allocation_size_requests_are_reported_not_reserved() {
    let fx = fixture_with(Some(1 << 20), false);
    let r = CreateRequest {
        allocation_size: 1 << 20,
        ..req("a", D::OverwriteIf)
    };
    let o = fx.fs.create(&r).unwrap();
    assert_eq!((o.info.allocation_size, o.info.end_of_file), (1 << 20, 0));
    assert_eq!(fx.quota.used(), 0);
    // Overwrite with a hint again, and a plain open reports the real allocation.
    let o2 = fx
        .fs
        .create(&CreateRequest {
            allocation_size: 5000,
            ..req("a", D::OverwriteIf)
        })
        .unwrap();
    assert_eq!(o2.info.allocation_size, 8192);
    assert_eq!(open(&fx, "a", D::Open).unwrap().info.allocation_size, 0);
    o2.file.set_allocation_size(100_000).unwrap();
    assert_eq!(o2.file.info().unwrap().allocation_size, 102_400);
    // ChangeTime follows the write time, which clients can set.
    let t = 116_444_736_000_000_000u64; // 1970
    o2.file
        .set_basic_info(&BasicInfoChange {
            last_write_time: Some(t),
            change_time: Some(t),
            ..Default::default()
        })
        .unwrap();
    let info = o2.file.info().unwrap();
    assert_eq!((info.last_write_time, info.change_time), (t, t));
}

#[test]
fn forward_slashes_separate_components() {
    let fx = fixture();
    mkdir(&fx, "d");
    open(&fx, "d/f", D::Create).unwrap();
    assert!(fx.root.join("d/f").exists());
    assert_eq!(
        open(&fx, "d/../../x", D::Create).unwrap_err(),
        nt::OBJECT_PATH_SYNTAX_BAD
    );
    assert_eq!(
        open(&fx, "/d/f", D::Open).unwrap_err(),
        nt::INVALID_PARAMETER
    );
}

/// An open keeps the stored attributes it read while the file's ctime proves them
/// current (`known_stored`): a change by another open or by a process outside the server
/// must show at the next query and in the close's answer all the same.
#[test]
fn stored_attributes_changed_by_another_open_or_outside_show_at_once() {
    use std::os::fd::AsFd;
    let fx = fixture();
    drop(
        fx.fs
            .create(&CreateRequest {
                attributes: attr::HIDDEN,
                ..req("m", D::Create)
            })
            .unwrap(),
    );
    // Settle the file's ctime, so that the reader's open keeps what it reads.
    std::thread::sleep(super::known_stored::SETTLED + std::time::Duration::from_millis(100));
    let reader = open_to_read(&fx, "m");
    assert_eq!(reader.info.attributes, attr::HIDDEN | attr::ARCHIVE);
    assert_eq!(
        reader.file.info().unwrap().attributes,
        attr::HIDDEN | attr::ARCHIVE
    );

    let setter = open(&fx, "m", D::Open).unwrap();
    setter
        .file
        .set_basic_info(&BasicInfoChange {
            attributes: Some(attr::SYSTEM),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(reader.file.info().unwrap().attributes, attr::SYSTEM);

    let outside = fs::File::open(fx.root.join("m")).unwrap();
    super::sys::fsetxattr(
        outside.as_fd(),
        c"user.quarry.dosattrib",
        &attr::READONLY.to_le_bytes(),
    )
    .unwrap();
    assert_eq!(
        reader.file.close_and_info().unwrap().attributes,
        attr::READONLY
    );
}

#[test]
fn without_xattrs_attributes_fall_back_to_defaults() {
    let fx = fixture();
    fx.fs.inner.xattrs.disable();
    let o = fx
        .fs
        .create(&CreateRequest {
            attributes: attr::HIDDEN,
            ..req("f", D::Create)
        })
        .unwrap();
    // Nothing can be stored: the defaults are reported and changes are accepted, not kept.
    assert_eq!(o.info.attributes, attr::ARCHIVE);
    o.file
        .set_basic_info(&BasicInfoChange {
            attributes: Some(attr::READONLY),
            creation_time: Some(1),
            ..Default::default()
        })
        .unwrap();
    let info = o.file.info().unwrap();
    assert_eq!(info.attributes, attr::ARCHIVE);
    assert!(info.creation_time > 1);
    assert!(mkdir(&fx, "d").info.attributes == attr::DIRECTORY);
}

#[test]
fn concurrent_creates_keep_the_name_cache_exact() {
    let fx = fixture();
    mkdir(&fx, "d");
    // Prime the cache for "d" with a case-insensitive miss.
    assert_eq!(
        open(&fx, "D\\NOTHING", D::Open).unwrap_err(),
        nt::OBJECT_NAME_NOT_FOUND
    );
    std::thread::scope(|s| {
        for t in 0..8 {
            let fx = &fx;
            s.spawn(move || {
                for i in 0..100 {
                    open(fx, &format!("d\\File{t}_{i}"), D::Create).unwrap();
                }
            });
        }
    });
    for t in 0..8 {
        for i in 0..100 {
            open(&fx, &format!("D\\FILE{t}_{i}"), D::Open).unwrap();
        }
    }
    // Racing creates of case variants of one name make one file.
    std::thread::scope(|s| {
        for t in 0..8 {
            let fx = &fx;
            s.spawn(move || {
                let name = if t % 2 == 0 { "d\\Same" } else { "d\\SAME" };
                open(fx, name, D::OpenIf).unwrap();
            });
        }
    });
    let same = fs::read_dir(fx.root.join("d"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .eq_ignore_ascii_case("same")
        })
        .count();
    assert_eq!(same, 1);
}

/// Creates `name` with a write time in 2017, so any update by a write is visible; returns
/// that time as a FILETIME.
fn file_written_long_ago(fx: &Fixture, name: &str) -> quarry_smb::vfs::FileTime {
    open(fx, name, D::Create).unwrap();
    let secs: u64 = 1_500_000_000;
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    fs::File::options()
        .write(true)
        .open(fx.root.join(name))
        .unwrap()
        .set_modified(old)
        .unwrap();
    quarry_smb::vfs::filetime_from_unix(secs as i64, 0)
}

#[test]
fn a_due_write_time_update_shows_in_the_query_that_settles_it() {
    // smbtorture smb2.timestamps.delayed-1write: write, wait out the delay, query once.
    let fx = fixture();
    let old_ft = file_written_long_ago(&fx, "f");
    let o = open(&fx, "f", D::Open).unwrap();
    assert_eq!(o.info.last_write_time, old_ft);
    o.file.write_at(0, b"a", false).unwrap();
    std::thread::sleep(super::write_time::WRITE_TIME_DELAY + std::time::Duration::from_millis(50));
    assert!(o.file.info().unwrap().last_write_time > old_ft);
}

#[test]
fn write_time_updates_are_delayed_like_windows() {
    let fx = fixture();
    let old_ft = file_written_long_ago(&fx, "f");
    let o = open(&fx, "f", D::Open).unwrap();
    // The first write does not show yet, to this open or to others.
    o.file.write_at(0, b"a", false).unwrap();
    assert_eq!(o.file.info().unwrap().last_write_time, old_ft);
    assert_eq!(
        open(&fx, "f", D::Open).unwrap().info.last_write_time,
        old_ft
    );
    // A flush shows it.
    o.file.flush().unwrap();
    let flushed = o.file.info().unwrap().last_write_time;
    assert!(flushed > old_ft);
    // Later writes through the same open do not move it until the close.
    std::thread::sleep(std::time::Duration::from_millis(20));
    o.file.write_at(1, b"b", false).unwrap();
    assert_eq!(o.file.info().unwrap().last_write_time, flushed);
    o.file.close().unwrap();
    let closed = open(&fx, "f", D::Open).unwrap().info.last_write_time;
    assert!(closed > flushed);
    // An explicit write time sticks through later writes and the close.
    let o = open(&fx, "f", D::Open).unwrap();
    o.file
        .set_basic_info(&BasicInfoChange {
            last_write_time: Some(old_ft),
            ..Default::default()
        })
        .unwrap();
    o.file.write_at(0, b"c", false).unwrap();
    o.file.set_end_of_file(10).unwrap();
    drop(o);
    assert_eq!(
        open(&fx, "f", D::Open).unwrap().info.last_write_time,
        old_ft
    );
}

#[test]
fn freeze_and_thaw_values_are_not_timestamps() {
    use quarry_smb::vfs::{FILETIME_FREEZE, FILETIME_THAW};
    let fx = fixture();
    let o = open(&fx, "f", D::Create).unwrap();
    let before = o.file.info().unwrap();
    let all = |t| BasicInfoChange {
        creation_time: Some(t),
        last_access_time: Some(t),
        last_write_time: Some(t),
        change_time: Some(t),
        attributes: None,
    };
    o.file.set_basic_info(&all(FILETIME_FREEZE)).unwrap();
    // Frozen: a write through this open leaves the write time alone, even at close.
    std::thread::sleep(std::time::Duration::from_millis(20));
    o.file.write_at(0, b"x", false).unwrap();
    o.file.close().unwrap();
    let after = o.file.info().unwrap();
    assert_eq!(
        (after.creation_time, after.last_write_time),
        (before.creation_time, before.last_write_time)
    );
    o.file.set_basic_info(&all(FILETIME_THAW)).unwrap();
    assert_eq!(o.file.info().unwrap().creation_time, before.creation_time);
}

#[test]
fn delete_on_close_of_read_only_files_is_refused_before_creating() {
    let fx = fixture();
    let doc_ro = CreateRequest {
        options: co::DELETE_ON_CLOSE | co::NON_DIRECTORY_FILE,
        attributes: attr::READONLY,
        ..req("ro", D::Create)
    };
    assert_eq!(
        fx.fs.create(&doc_ro).unwrap_err().nt_status(),
        nt::CANNOT_DELETE
    );
    assert!(!fx.root.join("ro").exists());
    fx.fs
        .create(&CreateRequest {
            attributes: attr::READONLY,
            ..req("ro", D::Create)
        })
        .unwrap();
    let doc = CreateRequest {
        options: co::DELETE_ON_CLOSE,
        write: false,
        ..req("ro", D::Open)
    };
    assert_eq!(
        fx.fs.create(&doc).unwrap_err().nt_status(),
        nt::CANNOT_DELETE
    );
}

/// What the gate saw of one existing file: its descriptor and, when asked, its parent's.
type SeenExisting = (Option<Vec<u8>>, Option<Option<Vec<u8>>>);

/// A gate that records what the storage layer tells it and refuses what it is told to.
#[derive(Debug, Default)]
struct RecordingGate {
    refuse_existing: bool,
    seen_existing: std::sync::Mutex<Vec<SeenExisting>>,
    seen_parent_of_new: std::sync::Mutex<Vec<Option<Vec<u8>>>>,
}

impl quarry_smb::vfs::CreateSecurity for RecordingGate {
    fn check_existing(&self, f: &quarry_smb::vfs::ExistingFile<'_>) -> Result<(), FsError> {
        let parent = match f.parent {
            Some(read) => Some(read()?),
            None => None,
        };
        self.seen_existing
            .lock()
            .unwrap()
            .push((f.descriptor.map(<[u8]>::to_vec), parent));
        if self.refuse_existing {
            return Err(FsError::AccessDenied("refused by the test gate".into()));
        }
        Ok(())
    }

    fn descriptor_for_new(&self, parent: Option<&[u8]>, is_dir: bool) -> Result<Vec<u8>, FsError> {
        self.seen_parent_of_new
            .lock()
            .unwrap()
            .push(parent.map(<[u8]>::to_vec));
        Ok(if is_dir {
            b"dir-sd".to_vec()
        } else {
            b"file-sd".to_vec()
        })
    }
}

#[test]
fn descriptors_are_stored_at_create_and_shown_to_the_gate_before_truncation() {
    let fx = fixture();
    let gate = RecordingGate::default();
    let dir = fx
        .fs
        .create(&CreateRequest {
            options: co::DIRECTORY_FILE,
            security: Some(&gate),
            ..req("d", D::Create)
        })
        .unwrap();
    assert_eq!(
        dir.file.security_descriptor().unwrap(),
        Some(b"dir-sd".to_vec())
    );
    let f = fx
        .fs
        .create(&CreateRequest {
            security: Some(&gate),
            ..req("d\\f", D::Create)
        })
        .unwrap();
    f.file.write_at(0, b"kept", false).unwrap();
    drop(f);
    assert_eq!(
        *gate.seen_parent_of_new.lock().unwrap(),
        vec![None, Some(b"dir-sd".to_vec())],
        "the share root has no stored descriptor; the new directory has"
    );
    let refusing = RecordingGate {
        refuse_existing: true,
        ..Default::default()
    };
    let refused = fx.fs.create(&CreateRequest {
        security: Some(&refusing),
        ..req("d\\f", D::Overwrite)
    });
    assert_eq!(refused.err().map(|e| e.nt_status()), Some(0xC000_0022));
    assert_eq!(
        *refusing.seen_existing.lock().unwrap(),
        vec![(Some(b"file-sd".to_vec()), Some(Some(b"dir-sd".to_vec())))]
    );
    let again = open(&fx, "d\\f", D::Open).unwrap();
    assert_eq!(
        again.info.end_of_file, 4,
        "a refused overwrite truncates nothing"
    );
    again.file.set_security_descriptor(b"new-sd").unwrap();
    assert_eq!(
        again.file.security_descriptor().unwrap(),
        Some(b"new-sd".to_vec())
    );
    let root = fx
        .fs
        .create(&CreateRequest {
            security: Some(&refusing),
            ..req("", D::Open)
        })
        .err();
    assert!(root.is_some(), "the share root is checked too");
}

#[test]
fn a_cached_open_still_shows_the_gate_its_parents_descriptor() {
    let fx = fixture();
    let gate = RecordingGate::default();
    for (path, options) in [("d", co::DIRECTORY_FILE), ("d\\f", 0)] {
        fx.fs
            .create(&CreateRequest {
                options,
                security: Some(&gate),
                ..req(path, D::Create)
            })
            .unwrap();
    }
    // The cached open no longer opens the parent up front; the gate's parent reader
    // opens it when called and must still find the parent's stored descriptor.
    let seen = RecordingGate::default();
    let cached = fx
        .fs
        .open_cached(&CreateRequest {
            security: Some(&seen),
            ..req("d\\f", D::Open)
        })
        .unwrap();
    assert_eq!(cached.file.path(), "d\\f");
    assert_eq!(
        *seen.seen_existing.lock().unwrap(),
        vec![(Some(b"file-sd".to_vec()), Some(Some(b"dir-sd".to_vec())))]
    );
    // A file in the share root: its parent is the root, which stores no descriptor.
    fx.fs
        .create(&CreateRequest {
            security: Some(&gate),
            ..req("top", D::Create)
        })
        .unwrap();
    let top = RecordingGate::default();
    fx.fs
        .open_cached(&CreateRequest {
            security: Some(&top),
            ..req("top", D::Open)
        })
        .unwrap();
    assert_eq!(
        *top.seen_existing.lock().unwrap(),
        vec![(Some(b"file-sd".to_vec()), Some(None))]
    );
}

#[test]
fn without_xattrs_an_explicit_descriptor_is_refused_not_dropped() {
    let fx = fixture();
    fx.fs.inner.xattrs.disable();
    let f = open(&fx, "plain", D::Create).unwrap();
    assert_eq!(f.file.security_descriptor().unwrap(), None);
    assert_eq!(
        f.file
            .set_security_descriptor(b"sd")
            .map_err(|e| e.nt_status()),
        Err(0xC000_00BB),
        "NOT_SUPPORTED"
    );
}

/// Opens stream `name` of `path` with `disposition`.
fn open_stream(fx: &Fixture, path: &str, name: &str, disposition: D) -> Result<Opened, u32> {
    fx.fs
        .create(&CreateRequest {
            stream: Some(name),
            ..req(path, disposition)
        })
        .map_err(|e| e.nt_status())
}

#[test]
fn listings_carry_apple_stream_metadata_when_asked() {
    use std::os::unix::fs::PermissionsExt;
    let fx = fixture();
    open(&fx, "plain", D::Create).unwrap();
    let afp: Vec<u8> = (0..60u8).collect();
    let s = open_stream(&fx, "mac", "AFP_AfpInfo", D::Create).unwrap();
    s.file.write_at(0, &afp, false).unwrap();
    // Stream names fold case, as every stream lookup does.
    let r = open_stream(&fx, "mac", "afp_resource", D::Create).unwrap();
    r.file.write_at(0, &[7u8; 300], false).unwrap();
    let odd = open_stream(&fx, "odd", "AFP_AfpInfo", D::Create).unwrap();
    odd.file.write_at(0, &[1u8; 61], false).unwrap();
    fs::set_permissions(fx.root.join("plain"), fs::Permissions::from_mode(0o604)).unwrap();
    let root = open(&fx, "", D::Open).unwrap();
    let entries = |mac: bool| {
        let mut c = root.file.list_dir("*").unwrap();
        if mac {
            c.want_mac_metadata();
        }
        let mut out = std::collections::BTreeMap::new();
        while let Some(e) = c.next_entry().unwrap() {
            out.insert(e.name.clone(), e);
        }
        out
    };
    let plain = entries(false);
    assert!(plain.values().all(|e| e.mac.is_none()));
    assert_eq!(plain["plain"].info.unix_mode, 0o100_604);
    let mac = entries(true);
    let m = mac["mac"].mac.clone().unwrap();
    assert_eq!(m.rfork_size, 300);
    assert_eq!(m.afp_info, Some(afp));
    assert_eq!(mac["plain"].mac, Some(Default::default()));
    assert_eq!(
        mac["odd"].mac.clone().unwrap().afp_info,
        None,
        "not 60 bytes"
    );
    assert!(mac["."].mac.is_some() && mac[".."].mac.is_none());
}

#[test]
fn streams_live_in_their_file_and_follow_dispositions() {
    let fx = fixture();
    assert_eq!(
        open_stream(&fx, "f", "s", D::Open).err(),
        Some(nt::OBJECT_NAME_NOT_FOUND)
    );
    let s = open_stream(&fx, "f", "Zone.Identifier", D::Create).unwrap();
    assert_eq!(s.action, CreateAction::Created);
    assert!(
        fx.root.join("f").is_file(),
        "the file is created with its first stream"
    );
    s.file.write_at(0, b"[ZoneTransfer]", false).unwrap();
    s.file.write_at(20, b"x", false).unwrap();
    let mut buf = [9u8; 32];
    assert_eq!(s.file.read_at(0, &mut buf).unwrap(), 21);
    assert_eq!(&buf[..21], b"[ZoneTransfer]\0\0\0\0\0\0x");
    assert_eq!(s.file.info().unwrap().end_of_file, 21);
    assert_eq!(s.file.path(), "f:Zone.Identifier");
    assert_eq!(
        open_stream(&fx, "f", "zone.identifier", D::Create).err(),
        Some(nt::OBJECT_NAME_COLLISION),
        "names compare case-insensitively"
    );
    let again = open_stream(&fx, "F", "ZONE.IDENTIFIER", D::OverwriteIf).unwrap();
    assert_eq!(again.action, CreateAction::Overwritten);
    assert_eq!(again.info.end_of_file, 0);
    let base = open(&fx, "f", D::Open).unwrap();
    let names: Vec<(String, u64)> = base
        .file
        .streams()
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.size))
        .collect();
    assert_eq!(
        names,
        vec![(String::new(), 0), ("Zone.Identifier".to_string(), 0)]
    );
    again.file.rename(":Other:$DATA", false).unwrap();
    assert_eq!(again.file.path(), "f:Other");
    let second = open_stream(&fx, "f", "second", D::Create).unwrap();
    assert_eq!(
        second
            .file
            .rename(":other", false)
            .err()
            .map(|e| e.nt_status()),
        Some(nt::OBJECT_NAME_COLLISION)
    );
    assert_eq!(
        second
            .file
            .rename(":other", true)
            .err()
            .map(|e| e.nt_status()),
        Some(nt::INVALID_PARAMETER)
    );
    second.file.unlink().unwrap();
    assert_eq!(base.file.streams().unwrap().len(), 2, "unnamed plus Other");
    assert!(
        second.file.write_at(0, b"gone", false).is_err(),
        "a deleted stream takes no writes"
    );
}

#[test]
fn large_streams_move_to_the_side_store_and_go_with_their_file() {
    let fx = fixture_with(Some(64 << 20), false);
    let s = open_stream(&fx, "big", "rsrc", D::Create).unwrap();
    s.file.write_at(0, b"head", false).unwrap();
    assert!(
        !fx.root.join(".quarry-streams").exists(),
        "a small stream stays in its xattr"
    );
    // 1 MiB at an offset: beyond any xattr, so the stream moves, its first bytes kept.
    let body: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let used_before = fx.quota.used();
    s.file.write_at(4096, &body, false).unwrap();
    assert_eq!(s.file.info().unwrap().end_of_file, 4096 + (1 << 20));
    assert!(
        fx.quota.used() >= used_before + (1 << 20),
        "side bytes are charged"
    );
    let mut back = vec![0u8; 4096 + (1 << 20)];
    assert_eq!(s.file.read_at(0, &mut back).unwrap(), back.len());
    assert_eq!(&back[..4], b"head");
    assert!(back[4..4096].iter().all(|b| *b == 0));
    assert_eq!(&back[4096..], &body[..]);
    let sides = || {
        fs::read_dir(fx.root.join(".quarry-streams"))
            .unwrap()
            .count()
    };
    assert_eq!(sides(), 1);
    // Hidden from clients: not listed, not openable, not a rename target.
    let root = open(&fx, "", D::Open).unwrap();
    let mut cursor = root.file.list_dir("*").unwrap();
    while let Some(e) = cursor.next_entry().unwrap() {
        assert!(!e.name.eq_ignore_ascii_case(".quarry-streams"), "listed");
    }
    assert_eq!(
        open(&fx, ".Quarry-Streams", D::Open).err(),
        Some(nt::OBJECT_NAME_NOT_FOUND)
    );
    let other = open(&fx, "other", D::Create).unwrap();
    assert_eq!(
        other
            .file
            .rename(".quarry-streams", false)
            .err()
            .map(|e| e.nt_status()),
        Some(nt::ACCESS_DENIED)
    );
    // The stream is listed at its size, renamed without moving its bytes, shrunk, and
    // emptied by an overwriting open.
    let base = open(&fx, "big", D::Open).unwrap();
    let sizes: Vec<(String, u64)> = base
        .file
        .streams()
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.size))
        .collect();
    assert!(
        sizes.contains(&("rsrc".to_string(), 4096 + (1 << 20))),
        "{sizes:?}"
    );
    s.file.rename(":fork", false).unwrap();
    let mut four = [0u8; 4];
    assert_eq!(s.file.read_at(0, &mut four).unwrap(), 4);
    assert_eq!(&four, b"head");
    s.file.set_end_of_file(10).unwrap();
    assert_eq!(s.file.info().unwrap().end_of_file, 10);
    let again = open_stream(&fx, "big", "FORK", D::OverwriteIf).unwrap();
    assert_eq!(again.info.end_of_file, 0);
    assert_eq!(sides(), 0, "the emptied stream gave its side file up");
    // Moved again, then the file is deleted: its side file goes with it.
    again.file.write_at(0, &body, false).unwrap();
    assert_eq!(sides(), 1);
    drop(again);
    drop(s);
    base.file.unlink().unwrap();
    assert_eq!(sides(), 0, "the deleted file's side file is gone");
    assert!(
        fx.quota.used() < used_before + 4096,
        "and its bytes released"
    );
    // A stream within the xattr cap that the file system still refuses to keep inline
    // (ext4 keeps about 4 KiB of xattrs per inode) moves with what it held, then changes.
    let mid = open_stream(&fx, "mid", "s", D::Create).unwrap();
    mid.file.write_at(0, b"start", false).unwrap();
    mid.file.write_at(5, &body[..32 * 1024], false).unwrap();
    let mut back = vec![0u8; 5 + 32 * 1024];
    assert_eq!(mid.file.read_at(0, &mut back).unwrap(), back.len());
    assert_eq!(&back[..5], b"start");
    assert_eq!(&back[5..], &body[..32 * 1024]);
    mid.file.unlink().unwrap();
    drop(mid);
    // A file replaced by a rename takes its side files along too.
    let v = open_stream(&fx, "victim", "fork", D::Create).unwrap();
    v.file.write_at(0, &body, false).unwrap();
    drop(v);
    assert_eq!(sides(), 1);
    other.file.rename("victim", true).unwrap();
    assert_eq!(sides(), 0, "the replaced file's side file is gone");
}

#[test]
fn directories_have_streams_but_no_data_stream() {
    let fx = fixture();
    mkdir(&fx, "d");
    let s = open_stream(&fx, "d", "meta", D::Create).unwrap();
    assert!(!s.info.is_dir);
    let dir = open(&fx, "d", D::Open).unwrap();
    let names: Vec<String> = dir
        .file
        .streams()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, vec!["meta".to_string()]);
    let as_dir = fx.fs.create(&CreateRequest {
        options: co::DIRECTORY_FILE,
        stream: Some("meta"),
        ..req("d", D::Open)
    });
    assert_eq!(
        as_dir.err().map(|e| e.nt_status()),
        Some(nt::NOT_A_DIRECTORY)
    );
}

#[test]
fn extended_attributes_are_kept_upper_cased_and_removed_by_empty_values() {
    let fx = fixture();
    let f = open(&fx, "f", D::Create).unwrap();
    assert!(f.file.eas().unwrap().is_empty());
    f.file
        .set_eas(&[
            ("EaOne".into(), b"VALUE1".to_vec()),
            ("second".into(), b"ValueTwo".to_vec()),
        ])
        .unwrap();
    let s = open_stream(&fx, "f", "s", D::Create).unwrap();
    assert_eq!(
        s.file.eas().unwrap(),
        vec![
            ("EAONE".to_string(), b"VALUE1".to_vec()),
            ("SECOND".to_string(), b"ValueTwo".to_vec())
        ],
        "a stream's open sees its file's EAs; streams are not EAs"
    );
    f.file.set_eas(&[("eaone".into(), Vec::new())]).unwrap();
    assert_eq!(f.file.eas().unwrap().len(), 1);
}

/// Changes collected by an outside-change watcher.
type Seen = Arc<std::sync::Mutex<Vec<(String, u32, u32)>>>;

fn collecting_sink() -> (Seen, quarry_smb::notify::OutsideChangeSink) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let sink: quarry_smb::notify::OutsideChangeSink = Arc::new(move |p, a, f| {
        s.lock().unwrap().push((p.to_string(), a, f));
    });
    (seen, sink)
}

/// Waits up to 5 s for `want` (path, action) to be seen.
fn wait_for(seen: &Seen, want: &[(&str, u32)]) -> Vec<(String, u32, u32)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let got = seen.lock().unwrap().clone();
        let all = want
            .iter()
            .all(|(p, a)| got.iter().any(|(gp, ga, _)| gp == p && ga == a));
        if all || std::time::Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Runs `script` in a shell in `dir`: another process, as an admin's shell would be.
fn outside_shell(dir: &std::path::Path, script: &str) {
    let st = std::process::Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success(), "{script}");
}

#[test]
fn changes_made_by_other_processes_reach_the_watcher_and_our_own_do_not() {
    use quarry_smb::notify::{
        OutsideWatcher, ACTION_ADDED, ACTION_MODIFIED, ACTION_REMOVED, ACTION_RENAMED_NEW_NAME,
        ACTION_RENAMED_OLD_NAME,
    };
    let fx = fixture();
    fs::create_dir_all(fx.root.join("Sub/Deep")).unwrap();
    fs::create_dir(fx.root.join("flat")).unwrap();
    let (seen, sink) = collecting_sink();
    // Appliances run as root; fanotify with directory handles needs it (CI runs as root).
    let w = fx
        .fs
        .watch_outside_changes(sink)
        .expect("fanotify watcher (needs root and Linux 5.17+)");
    // The client opened "sub" in another case; the subtree is watched, "flat" is not.
    w.watch(&[("sub".to_string(), true)]);
    // This process's own change is the SMB server's: never reported.
    fs::write(fx.root.join("Sub/own.txt"), b"mine").unwrap();
    outside_shell(
        &fx.root,
        "echo a > Sub/a.txt && mv Sub/a.txt Sub/b.txt && echo x > Sub/Deep/d.txt && \
         mkdir Sub/New && echo n > Sub/New/n.txt && mv Sub/b.txt flat/ && rm Sub/own.txt && \
         echo f > flat/ignored.txt",
    );
    let want = [
        ("Sub\\a.txt", ACTION_ADDED),
        ("Sub\\a.txt", ACTION_RENAMED_OLD_NAME),
        ("Sub\\b.txt", ACTION_RENAMED_NEW_NAME),
        ("Sub\\Deep\\d.txt", ACTION_ADDED),
        ("Sub\\Deep\\d.txt", ACTION_MODIFIED),
        ("Sub\\New", ACTION_ADDED),
        ("Sub\\New\\n.txt", ACTION_ADDED),
        ("Sub\\b.txt", ACTION_REMOVED),
        ("Sub\\own.txt", ACTION_REMOVED),
    ];
    let got = wait_for(&seen, &want);
    for (p, a) in want {
        assert!(
            got.iter().any(|(gp, ga, _)| gp == p && *ga == a),
            "missing {p} action {a} in {got:?}"
        );
    }
    assert!(
        !got.iter()
            .any(|(p, a, _)| p == "Sub\\own.txt" && *a == ACTION_ADDED),
        "this process's own write was reported: {got:?}"
    );
    assert!(
        !got.iter().any(|(p, _, _)| p.starts_with("flat")),
        "an unwatched directory was reported: {got:?}"
    );
    // An empty set stops watching.
    w.watch(&[]);
    seen.lock().unwrap().clear();
    outside_shell(&fx.root, "echo z > Sub/z.txt");
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
}

/// Drops `path`'s clean pages from the page cache, so reading it needs the device again.
/// The kernel skips pages it cannot drop at that moment (still referenced from another
/// core's page batches, say), so the advice is repeated until `mincore` finds none of the
/// file's pages cached (a check that reads nothing, so it starts no readahead).
fn evict_from_page_cache(path: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    let len = usize::try_from(f.metadata().unwrap().len()).unwrap();
    for _ in 0..50 {
        // SAFETY: a valid descriptor; advice on the whole file.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        if len == 0 || cached_pages(&f, len) == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("could not drop {} from the page cache", path.display());
}

/// How many of the first `len` bytes' pages of `f` are in the page cache. Asked through
/// `mincore` of a mapping rather than `sys::cached_pages` (`cachestat`), which Linux before
/// 6.5, Debian 12's kernel among them, does not have.
fn cached_pages(f: &fs::File, len: usize) -> usize {
    use std::os::fd::AsRawFd;
    let page = usize::try_from(super::sys::page_size()).unwrap();
    // SAFETY: a fresh read-only shared mapping of an open file, never touched, unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: `map` spans `len` bytes; `resident` has one byte per page of it.
    let rc = unsafe { libc::mincore(map, len, resident.as_mut_ptr()) };
    // SAFETY: the mapping made above, of `len` bytes.
    unsafe { libc::munmap(map, len) };
    assert_eq!(rc, 0);
    resident.iter().filter(|b| **b & 1 != 0).count()
}

#[test]
fn cached_opens_answer_existing_files_and_leave_everything_else_to_create() {
    let fx = fixture();
    mkdir(&fx, "d");
    let made = open(&fx, "d\\f.txt", D::Create).unwrap();
    made.file.write_at(0, b"hello", false).unwrap();
    made.file.close().unwrap();
    drop(made);
    let by_create = open(&fx, "d\\f.txt", D::Open).unwrap();
    // A file just created is in the dentry cache: the cached open answers as create does.
    let cached = fx.fs.open_cached(&req("d\\f.txt", D::Open)).unwrap();
    assert_eq!(cached.action, CreateAction::Opened);
    assert_eq!(cached.info.file_id, by_create.info.file_id);
    assert_eq!(cached.info.end_of_file, 5);
    assert_eq!(cached.file.path(), "d\\f.txt");
    let mut buf = [0u8; 5];
    assert_eq!(cached.file.read_at(0, &mut buf).unwrap(), 5);
    assert_eq!(&buf, b"hello");
    let dir = fx
        .fs
        .open_cached(&CreateRequest {
            options: co::DIRECTORY_FILE,
            ..req("d", D::Open)
        })
        .unwrap();
    assert!(dir.info.is_dir);
    // What would create, truncate or write, and what needs the resolver's case-insensitive
    // scan, fails, leaving the share as it was.
    for d in [D::Create, D::Supersede, D::Overwrite, D::OverwriteIf] {
        assert!(fx.fs.open_cached(&req("d\\f.txt", d)).is_err(), "{d:?}");
        assert!(fx.fs.open_cached(&req("d\\new.txt", d)).is_err(), "{d:?}");
    }
    assert!(fx.fs.open_cached(&req("d\\new.txt", D::OpenIf)).is_err());
    assert!(!fx.root.join("d/new.txt").exists());
    assert_eq!(fs::read(fx.root.join("d/f.txt")).unwrap(), b"hello");
    assert!(fx.fs.open_cached(&req("D\\F.TXT", D::Open)).is_err());
    assert!(open(&fx, "D\\F.TXT", D::Open).is_ok());
    // Streams, bad option combinations, the root and escapes are not opened either.
    let stream = CreateRequest {
        stream: Some("s"),
        ..req("d\\f.txt", D::Open)
    };
    assert!(fx.fs.open_cached(&stream).is_err());
    let temporary_dir = CreateRequest {
        options: co::DIRECTORY_FILE,
        attributes: attr::TEMPORARY,
        ..req("d", D::Open)
    };
    assert!(matches!(
        fx.fs.open_cached(&temporary_dir),
        Err(FsError::InvalidParameter(_))
    ));
    assert!(fx.fs.open_cached(&req("", D::Open)).is_err());
    symlink(fx.outside.join("secret"), fx.root.join("out")).unwrap();
    assert!(fx.fs.open_cached(&req("out", D::Open)).is_err());
}

#[test]
fn cached_reads_come_from_the_page_cache_or_not_at_all() {
    let fx = fixture();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let o = open(&fx, "f", D::Create).unwrap();
    o.file.write_at(0, &data, false).unwrap();
    let mut buf = vec![0u8; 300_000];
    // Just written: all in the page cache; a read past the end stops there.
    assert_eq!(o.file.read_cached(0, &mut buf).unwrap(), data.len());
    assert_eq!(&buf[..data.len()], &data[..]);
    assert_eq!(o.file.read_cached(data.len() as u64, &mut buf).unwrap(), 0);
    // From inside a page to the end, which lies inside a page too.
    assert_eq!(o.file.read_cached(100, &mut buf).unwrap(), data.len() - 100);
    assert_eq!(&buf[..data.len() - 100], &data[100..]);
    // Evicted: the cached read answers only what it can get without waiting. The kernel's
    // non-blocking read starts readahead before it refuses, and on a fast device that
    // readahead can finish before the read looks again (seen in CI, and on this kind of
    // machine in most tries), so refusing cannot be asserted here; what it answers must be
    // right. Refusal without reading is asserted where Quarry decides it itself: large
    // uncached reads (`large_reads_of_uncached_files_bypass_the_page_cache...`).
    evict_from_page_cache(&fx.root.join("f"));
    match o.file.read_cached(0, &mut buf[..100_000]) {
        Err(FsError::WouldBlock) => {}
        Ok(n) => assert_eq!(&buf[..n], &data[..n], "a cached read's bytes"),
        Err(e) => panic!("cached read of evicted data: {e}"),
    }
    evict_from_page_cache(&fx.root.join("f"));
    assert_eq!(o.file.read_at(0, &mut buf[..100_000]).unwrap(), 100_000);
    assert_eq!(o.file.read_cached(0, &mut buf[..100_000]).unwrap(), 100_000);
    assert_eq!(&buf[..100_000], &data[..100_000]);
    let d = mkdir(&fx, "dir");
    assert!(matches!(
        d.file.read_cached(0, &mut buf),
        Err(FsError::IsDirectory)
    ));
}

/// The file's mtime on disk, as a FILETIME (what a process outside the share sees).
fn disk_write_time(fx: &Fixture, name: &str) -> u64 {
    let m = fs::metadata(fx.root.join(name)).unwrap();
    use std::os::unix::fs::MetadataExt;
    quarry_smb::vfs::filetime_from_unix(m.mtime(), m.mtime_nsec() as u32)
}

#[test]
fn a_dropped_last_open_writes_a_time_still_shown_on_the_blocking_pool_not_the_dropping_thread() {
    let fx = fixture();
    let old_ft = file_written_long_ago(&fx, "f");
    let write_time = || open(&fx, "f", D::Open).unwrap().info.last_write_time;
    // An explicit write time sticks through a later write: shown from memory, while the
    // kernel has moved mtime. The open is then dropped without a close.
    let o = open(&fx, "f", D::Open).unwrap();
    o.file
        .set_basic_info(&BasicInfoChange {
            last_write_time: Some(old_ft),
            ..Default::default()
        })
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    o.file.write_at(0, b"a", false).unwrap();
    assert_eq!(write_time(), old_ft);
    assert!(disk_write_time(&fx, "f") > old_ft);
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    rt.block_on(async {
        // The pool's only thread is held, so whatever goes to the pool waits.
        let holder = tokio::task::spawn_blocking(move || {
            started_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        started_rx.recv().unwrap();
        drop(o);
        assert!(
            disk_write_time(&fx, "f") > old_ft,
            "written on the dropping (runtime) thread"
        );
        assert_eq!(write_time(), old_ft, "not shown until written");
        release_tx.send(()).unwrap();
        holder.await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while disk_write_time(&fx, "f") != old_ft {
            assert!(std::time::Instant::now() < deadline, "never written");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    assert_eq!(write_time(), old_ft);
    // Outside a runtime the drop writes it at once.
    let o = open(&fx, "f", D::Open).unwrap();
    o.file
        .set_basic_info(&BasicInfoChange {
            last_write_time: Some(old_ft),
            ..Default::default()
        })
        .unwrap();
    o.file.write_at(0, b"b", false).unwrap();
    drop(o);
    assert_eq!(disk_write_time(&fx, "f"), old_ft);
}

#[test]
fn writes_and_closes_set_no_times_yet_every_answer_shows_the_delayed_update() {
    let fx = fixture();
    let old_ft = file_written_long_ago(&fx, "f");
    let listed = |fx: &Fixture| {
        let d = open(fx, "", D::Open).unwrap();
        let mut c = d.file.list_dir("f").unwrap();
        let e = c.next_entry().unwrap().unwrap();
        assert_eq!(e.name, "f");
        e.info.last_write_time
    };
    // A read-only open has nothing to settle: both answer from memory.
    let reader = open(&fx, "f", D::Open).unwrap();
    assert_eq!(reader.file.info_cached().unwrap().last_write_time, old_ft);
    reader.file.close_cached().unwrap();
    // A write moves mtime on disk, but this open, a new open and a listing still show the
    // time from before it.
    let writer = open(&fx, "f", D::Open).unwrap();
    let started = std::time::Instant::now();
    writer.file.write_at(0, b"a", false).unwrap();
    let written = disk_write_time(&fx, "f");
    assert!(written > old_ft);
    assert_eq!(writer.file.info_cached().unwrap().last_write_time, old_ft);
    assert_eq!(
        open(&fx, "f", D::Open).unwrap().info.last_write_time,
        old_ft
    );
    assert_eq!(listed(&fx), old_ft);
    // A cached close right after the write ends the delay: the update shows, as the time
    // of the write, which is the close's time to a client.
    writer.file.close_cached().unwrap();
    let closed = writer.file.info_cached().unwrap().last_write_time;
    assert_eq!(listed(&fx), closed);
    drop(writer);
    if started.elapsed() < std::time::Duration::from_millis(10) {
        assert_eq!(closed, written);
        assert_eq!(
            disk_write_time(&fx, "f"),
            written,
            "nothing written at the close"
        );
    } else {
        // Preempted past one clock tick of a client: the close showed its own time.
        assert!(closed > written);
    }
    // A due update shows in a cached query too.
    let late = open(&fx, "f", D::Open).unwrap();
    let before = late.info.last_write_time;
    std::thread::sleep(std::time::Duration::from_millis(20));
    late.file.write_at(0, b"b", false).unwrap();
    assert_eq!(late.file.info_cached().unwrap().last_write_time, before);
    std::thread::sleep(super::write_time::WRITE_TIME_DELAY + std::time::Duration::from_millis(50));
    assert!(late.file.info_cached().unwrap().last_write_time > before);
}

#[test]
fn a_close_long_after_a_write_shows_its_own_time_and_keeps_it() {
    // smbtorture smb2.timestamps.delayed-2write: the close's write time is later than the
    // moment it was sent, though the last write was seconds before.
    let fx = fixture();
    file_written_long_ago(&fx, "f");
    let o = open(&fx, "f", D::Open).unwrap();
    o.file.write_at(0, b"a", false).unwrap();
    let written = disk_write_time(&fx, "f");
    std::thread::sleep(std::time::Duration::from_millis(100));
    let sent = quarry_smb::vfs::filetime_from_unix(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64,
        0,
    );
    o.file.close_cached().unwrap();
    let closed = o.file.info_cached().unwrap().last_write_time;
    assert!(closed > written && closed >= sent, "the close's own time");
    assert_eq!(
        disk_write_time(&fx, "f"),
        written,
        "kept in memory while open"
    );
    drop(o);
    assert_eq!(
        disk_write_time(&fx, "f"),
        closed,
        "written when the last open ends"
    );
}

#[test]
fn an_update_shows_even_when_the_kernels_write_time_is_not_later() {
    // mtime set ahead of the clock (as a coarse kernel clock may leave a write's time equal
    // to the change before it): the kernel's time of the write cannot show the update, so
    // the current time is shown, and written when the last open ends.
    let fx = fixture();
    fs::write(fx.root.join("f"), b"x").unwrap();
    let ahead = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(fx.root.join("f"))
        .unwrap()
        .set_modified(ahead)
        .unwrap();
    let o = open(&fx, "f", D::Open).unwrap();
    let ahead_ft = o.info.last_write_time;
    o.file.write_at(0, b"a", false).unwrap();
    assert_eq!(o.file.info().unwrap().last_write_time, ahead_ft);
    let written = disk_write_time(&fx, "f");
    assert!(written < ahead_ft);
    o.file.flush().unwrap();
    let shown = o.file.info().unwrap().last_write_time;
    assert!(shown != ahead_ft && shown >= written, "the update shows");
    o.file.close().unwrap();
    drop(o);
    assert_eq!(
        disk_write_time(&fx, "f"),
        shown,
        "kept once no open holds it"
    );
    assert_eq!(open(&fx, "f", D::Open).unwrap().info.last_write_time, shown);
}

#[test]
fn large_listings_keep_readdir_order_and_each_entry_its_own_metadata() {
    large_listing_keeps_readdir_order_and_each_entry_its_own_metadata();
}

/// The same listing from the blocking pool of a runtime, where the cursor looks names up
/// in the background ahead of its answers: the answers are the same, and a cursor dropped
/// with lookups still running is harmless.
#[test]
fn large_listings_with_background_lookups_answer_the_same() {
    use std::sync::atomic::Ordering;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    super::dir::test_switches::WARM_CACHED.store(true, Ordering::Relaxed);
    let started = super::dir::test_switches::LOOKUPS_STARTED.load(Ordering::Relaxed);
    rt.block_on(
        rt.spawn_blocking(large_listing_keeps_readdir_order_and_each_entry_its_own_metadata),
    )
    .unwrap();
    super::dir::test_switches::WARM_CACHED.store(false, Ordering::Relaxed);
    assert!(super::dir::test_switches::LOOKUPS_STARTED.load(Ordering::Relaxed) > started);
}

fn large_listing_keeps_readdir_order_and_each_entry_its_own_metadata() {
    let fx = fixture();
    mkdir(&fx, "many");
    const N: usize = 1500;
    for i in 0..N {
        fs::write(fx.root.join(format!("many/f{i:04}")), vec![7u8; i % 700]).unwrap();
    }
    // A fifo among them is hidden.
    let fifo = std::ffi::CString::new(fx.root.join("many/pipe").to_str().unwrap()).unwrap();
    // SAFETY: `fifo` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let readdir_order: Vec<String> = fs::read_dir(fx.root.join("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "pipe")
        .collect();
    let d = open(&fx, "many", D::Open).unwrap();
    let mut c = d.file.list_dir("*").unwrap();
    let mut listed = Vec::new();
    while let Some(e) = c.next_entry().unwrap() {
        if e.name == "." || e.name == ".." {
            continue;
        }
        let i: usize = e.name[1..].parse().unwrap();
        assert_eq!(e.info.end_of_file, (i % 700) as u64, "{}", e.name);
        listed.push(e.name);
    }
    assert_eq!(listed, readdir_order);
    // A restart part way starts over.
    c.restart().unwrap();
    for _ in 0..300 {
        c.next_entry().unwrap().unwrap();
    }
    c.restart().unwrap();
    let mut again = Vec::new();
    while let Some(e) = c.next_entry().unwrap() {
        again.push(e.name);
    }
    assert_eq!(&again[2..], &readdir_order[..]);
    // An entry changed after its name was read ahead (and looked up in the background,
    // where a runtime is) is answered as it is when answered.
    c.restart().unwrap();
    for _ in 0..300 {
        c.next_entry().unwrap().unwrap();
    }
    let changed = &readdir_order[600];
    fs::write(fx.root.join("many").join(changed), vec![1u8; 999]).unwrap();
    let mut seen = None;
    while let Some(e) = c.next_entry().unwrap() {
        if &e.name == changed {
            seen = Some(e.info.end_of_file);
        }
    }
    assert_eq!(seen, Some(999), "{changed}");
}

#[test]
fn listings_read_entries_the_same_with_or_without_opening_them() {
    let fx = fixture();
    mkdir(&fx, "d");
    mkdir(&fx, "d\\sub");
    let f = open(&fx, "d\\hidden.txt", D::Create).unwrap();
    f.file.write_at(0, b"data", false).unwrap();
    f.file
        .set_basic_info(&BasicInfoChange {
            attributes: Some(attr::HIDDEN | attr::ARCHIVE),
            ..Default::default()
        })
        .unwrap();
    open(&fx, "d\\plain.txt", D::Create).unwrap();
    symlink("plain.txt", fx.root.join("d/link")).unwrap();
    symlink(fx.outside.join("secret"), fx.root.join("d/escape")).unwrap();
    let dir = open(&fx, "d", D::Open).unwrap();
    let entries = |at_calls: bool| {
        super::attrs::use_xattr_at_calls(at_calls);
        let mut c = dir.file.list_dir("*").unwrap();
        let mut v = Vec::new();
        while let Some(e) = c.next_entry().unwrap() {
            v.push((e.name, e.info));
        }
        v
    };
    // A first listing settles the directory's own access time (relatime), which "." shows.
    entries(true);
    let opened = entries(false);
    let read_at = entries(true);
    assert_eq!(read_at, opened);
    let names: Vec<&str> = read_at.iter().map(|(n, _)| n.as_str()).collect();
    for want in ["hidden.txt", "plain.txt", "sub", "link"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(!names.contains(&"escape"), "{names:?}");
    let hidden = read_at.iter().find(|(n, _)| n == "hidden.txt").unwrap();
    assert_eq!(hidden.1.attributes & attr::HIDDEN, attr::HIDDEN);
    assert_eq!(hidden.1.end_of_file, 4);
}

#[test]
fn new_files_spread_over_many_directories_scan_each_directory_once() {
    let fx = fixture();
    // More directories than the name cache used to keep (64), used round robin as a
    // dataset's writers do: each directory is read once, when its first new name misses.
    let dirs = 100;
    for d in 0..dirs {
        mkdir(&fx, &format!("d{d:03}"));
    }
    let scans = || fx.fs.inner.names.scans();
    let before = scans();
    for round in 0..3 {
        for d in 0..dirs {
            open(&fx, &format!("d{d:03}\\f{round}"), D::Create).unwrap();
        }
    }
    assert_eq!(scans() - before, dirs as u64);
    // Names created through the share are found in any case without another scan.
    open(&fx, "D042\\F2", D::Open).unwrap();
    assert_eq!(scans() - before, dirs as u64);
}

/// A `len`-byte window of a fresh buffer whose address is congruent to `offset` modulo
/// 4 KiB, as the READ handler places its data: (buffer, start of the window).
fn co_aligned(len: usize, offset: u64) -> (Vec<u8>, usize) {
    let buf = vec![0u8; len + 8192];
    let natural = buf.as_ptr() as usize % 4096;
    let start = (offset as usize % 4096 + 4096 - natural) % 4096;
    (buf, start)
}

/// Direct read calls made on this thread so far.
fn direct_reads() -> u64 {
    super::direct::DIRECT_READS_ON_THIS_THREAD.with(|c| c.get())
}

#[test]
fn large_reads_of_uncached_files_bypass_the_page_cache_and_read_what_was_written() {
    let fx = fixture();
    let size = (3 << 20) + 123;
    let data: Vec<u8> = (0..size).map(|i| (i * 13 % 251) as u8).collect();
    fs::write(fx.root.join("big.bin"), &data).unwrap();
    evict_from_page_cache(&fx.root.join("big.bin"));
    let o = open(&fx, "big.bin", D::Open).unwrap();
    let direct_works = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(fx.root.join("big.bin"))
        .is_ok();

    // Uncached and large: the cached-only read declines without reading (so without
    // starting readahead), and the read takes the direct path: an unaligned head
    // buffered, the rest straight into the buffer.
    let offset = 3 * 4096 + 100;
    let len = 1 << 20;
    let (mut buf, at) = co_aligned(len, offset as u64);
    assert!(matches!(
        o.file.read_cached(offset as u64, &mut buf[at..at + len]),
        Err(FsError::WouldBlock)
    ));
    let before = direct_reads();
    assert_eq!(
        o.file
            .read_at(offset as u64, &mut buf[at..at + len])
            .unwrap(),
        len
    );
    assert!(buf[at..at + len] == data[offset..offset + len]);
    assert_eq!(direct_reads() > before, direct_works, "direct read used");

    // Across the end of the file: exactly the bytes that exist.
    let offset = size - 300_000 - (size - 300_000) % 4096;
    let (mut buf, at) = co_aligned(len, offset as u64);
    let n = o
        .file
        .read_at(offset as u64, &mut buf[at..at + len])
        .unwrap();
    assert_eq!(n, size - offset);
    assert!(buf[at..at + n] == data[offset..]);

    // A small buffered write through the same open is seen by the next direct read.
    o.file.write_at(40_000, b"fresh bytes", false).unwrap();
    let (mut buf, at) = co_aligned(len, 0);
    assert_eq!(o.file.read_at(0, &mut buf[at..at + len]).unwrap(), len);
    assert_eq!(&buf[at + 40_000..at + 40_011], b"fresh bytes");
    assert!(buf[at..at + 40_000] == data[..40_000]);

    // Memory not aligned as the offset: buffered, same bytes.
    let before = direct_reads();
    let (mut buf, at) = co_aligned(len + 1, 0);
    assert_eq!(
        o.file.read_at(0, &mut buf[at + 1..at + 1 + len]).unwrap(),
        len
    );
    assert!(buf[at + 1 + 50_000..at + 1 + len] == data[50_000..len]);
    assert_eq!(direct_reads(), before, "misaligned memory stays buffered");

    // A second open of the file: its readers share the page cache, so reads are
    // buffered, and they leave the pages cached ...
    let other = open(&fx, "big.bin", D::Open).unwrap();
    let mut whole = vec![0u8; size + 10];
    assert_eq!(other.file.read_at(0, &mut whole).unwrap(), size);
    assert_eq!(direct_reads(), before, "shared file stays buffered");
    drop(other);
    // ... so the single open's large read is served from the cache on the spot.
    let (mut buf, at) = co_aligned(len, 8192);
    assert_eq!(
        o.file.read_cached(8192, &mut buf[at..at + len]).unwrap(),
        len
    );
    assert_eq!(direct_reads(), before);
    assert!(buf[at + 40_000 - 8192..at + 40_011 - 8192] == *b"fresh bytes");
}

#[test]
fn opens_of_one_file_share_large_reads_until_its_data_changes() {
    // This test changes the file and reads it back at once; the settle rule has a test of
    // its own below.
    super::shared_reads::SETTLE_ON_THIS_THREAD.with(|s| s.set(Some(std::time::Duration::ZERO)));
    let fx = fixture();
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 253) as u8).collect();
    let a = open(&fx, "weights", D::Create).unwrap();
    a.file.write_at(0, &data, false).unwrap();
    // A file open once has no one to share with.
    assert!(a.file.read_shared(0, 300_000, false).unwrap().is_none());
    let b = open(&fx, "weights", D::Open).unwrap();
    // Nor does one open reading a file that another open only holds.
    assert!(a.file.read_shared(0, 300_000, false).unwrap().is_none());
    // Once a second open reads, its read is kept...
    let first = b.file.read_shared(0, 300_000, false).unwrap().unwrap();
    assert_eq!(first.as_slice(), &data[..300_000]);
    // ...and the other open's read of the same range is answered with the same bytes;
    // another range is read afresh, and a read past the end stops there.
    let again = a.file.read_shared(0, 300_000, true).unwrap().unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    let rest = b
        .file
        .read_shared(300_000, 400_000, false)
        .unwrap()
        .unwrap();
    assert_eq!(rest.as_slice(), &data[300_000..]);
    // A write through either open ends the answer: the next read sees the new bytes.
    b.file.write_at(10, b"changed", false).unwrap();
    let after = a.file.read_shared(0, 300_000, false).unwrap().unwrap();
    assert!(!Arc::ptr_eq(&first, &after));
    assert_eq!(&after[10..17], b"changed");
    // So does a truncate.
    let kept = a.file.read_shared(0, 300_000, false).unwrap().unwrap();
    assert!(Arc::ptr_eq(&after, &kept));
    b.file.set_end_of_file(1000).unwrap();
    let cut = a.file.read_shared(0, 300_000, false).unwrap().unwrap();
    assert_eq!(cut.len(), 1000);
    // A change made outside Quarry, seen through the file's times.
    let kept = b.file.read_shared(0, 300_000, false).unwrap().unwrap();
    assert!(Arc::ptr_eq(&cut, &kept));
    {
        use std::os::unix::fs::FileExt;
        let outside = fs::OpenOptions::new()
            .write(true)
            .open(fx.root.join("weights"))
            .unwrap();
        outside.write_all_at(b"OUTSIDE", 0).unwrap();
        // A time of its own, so the change shows even within one clock tick.
        outside
            .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
            .unwrap();
    }
    let seen = a.file.read_shared(0, 300_000, false).unwrap().unwrap();
    assert_eq!(&seen[..7], b"OUTSIDE");
    // Directories never share.
    let d = mkdir(&fx, "dir");
    let d2 = open(&fx, "dir", D::Open).unwrap();
    assert!(d.file.read_shared(0, 300_000, false).unwrap().is_none());
    drop(d2);
}

#[test]
fn a_file_changed_within_the_settle_time_is_read_but_not_shared() {
    let fx = fixture();
    let data = vec![7u8; 300_000];
    let a = open(&fx, "fresh", D::Create).unwrap();
    a.file.write_at(0, &data, false).unwrap();
    let b = open(&fx, "fresh", D::Open).unwrap();
    // The first reader alone takes the ordinary path.
    assert!(a.file.read_shared(0, 300_000, false).unwrap().is_none());
    // Both opens read; the file changed just now, so neither takes the shared path (nothing
    // would be kept between them: a change from outside in the same tick or second might
    // not have moved its times), and both read the file's bytes the ordinary way.
    for f in [&b, &a, &b] {
        assert!(
            f.file.read_shared(0, 300_000, false).unwrap().is_none(),
            "shared a just-changed file"
        );
    }
    let mut buf = vec![0u8; 300_000];
    assert_eq!(a.file.read_at(0, &mut buf).unwrap(), 300_000);
    assert_eq!(buf, data);
}
