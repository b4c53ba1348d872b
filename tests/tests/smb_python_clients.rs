//! SMB interop with the Python clients against the real `quarry` binary: `smbprotocol` (PyPI)
//! with encryption on, including a directory of 5,000 files listed completely and path-escape
//! attempts that smbclient would fold away; and impacket 0.13's SMBConnection, through the
//! SMB1 NEGOTIATE upgrade and directly with 3.1.1; and a durable handle (v2) that survives
//! its TCP connection being destroyed and is reclaimed on a new one to go on writing; and the
//! Apple AAPL create context with the Apple fields of directory listings.

use std::net::IpAddr;
use std::process::Command;

use quarry_tests::QuarryProcess;
use serde_json::json;

const USER: &str = "carol";
const PASS: &str = "carol-secret-9";

fn setup() -> QuarryProcess {
    with_user_and_share(QuarryProcess::start().expect("quarry starts"))
}

/// Where the share `data` lives on the appliance's disk (the embedded directory pool).
fn data_dir(q: &QuarryProcess) -> std::path::PathBuf {
    q.data.join("pool/shares/data")
}

/// Adds the user and the share `data` the scripts use.
fn with_user_and_share(q: QuarryProcess) -> QuarryProcess {
    let api = q.admin().expect("admin login");
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))
        .unwrap();
    api.create("/api/v1/shares", &json!({"name": "data"}))
        .unwrap();
    q
}

/// Runs a Python script with PORT/USER/PASS in its environment and `tests/python` (the
/// shared `quarry_smb` helpers) on its path; returns stdout+stderr.
fn python(q: &QuarryProcess, script: &str) -> String {
    python_with(q, script, &[])
}

/// [`python`] with more environment variables.
fn python_with(q: &QuarryProcess, script: &str, env: &[(&str, &str)]) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .envs(env.iter().copied())
        .env("PORT", q.smb.port().to_string())
        .env("SMBUSER", USER)
        .env("SMBPASS", PASS)
        // The scripts' shared connect helper (`quarry_smb.smb_tree`).
        .env("PYTHONPATH", concat!(env!("CARGO_MANIFEST_DIR"), "/python"))
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "python failed:\n{text}");
    text
}

const SMBPROTOCOL_OPS: &str = r#"
import os, hashlib
import smbclient
from smbprotocol.exceptions import SMBOSError
port = int(os.environ["PORT"])
smbclient.register_session("127.0.0.1", username=os.environ["SMBUSER"], password=os.environ["SMBPASS"], port=port, encrypt=True)
root = r"\\127.0.0.1\data"
data = os.urandom(3 * 1024 * 1024 + 5)
with smbclient.open_file(root + r"\a.bin", mode="wb", port=port) as f:
    f.write(data)
with smbclient.open_file(root + r"\a.bin", mode="rb", port=port) as f:
    assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()
st = smbclient.stat(root + r"\a.bin", port=port)
assert st.st_size == len(data), st
smbclient.rename(root + r"\a.bin", root + r"\b.bin", port=port)
assert smbclient.listdir(root, port=port) == ["b.bin"], smbclient.listdir(root, port=port)
smbclient.remove(root + r"\b.bin", port=port)
assert smbclient.listdir(root, port=port) == []
smbclient.mkdir(root + r"\d", port=port)
smbclient.rmdir(root + r"\d", port=port)
print("OK")
"#;

/// Raw CREATEs through smbprotocol's low-level API (its high-level API normalises `..` away).
const SMBPROTOCOL_ESCAPES: &str = r#"
from quarry_smb import smb_tree
from smbprotocol.open import Open, CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, ShareAccess, FileAttributes
from smbprotocol.exceptions import SMBResponseException
conn, sess, tree = smb_tree(require_encryption=True)
cases = [("..\\x.txt", 0xC000003B), ("a\\..\\..\\x.txt", 0xC000003B), ("a:b:c", 0xC0000033),
         ("d:x\\f.txt", 0xC0000033),
         ("CON", 0xC0000033), ("lpt1.txt", 0xC0000033), ("\\lead.txt", 0xC000000D)]
for bad, want in cases:
    o = Open(tree, bad)
    try:
        o.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_WRITE, FileAttributes.FILE_ATTRIBUTE_NORMAL,
                 ShareAccess.FILE_SHARE_READ, CreateDisposition.FILE_OVERWRITE_IF, CreateOptions.FILE_NON_DIRECTORY_FILE)
        raise SystemExit("accepted " + bad)
    except SMBResponseException as e:
        assert e.status == want, (bad, hex(e.status))
        print("refused", repr(bad), hex(e.status))
# The session still works after the refusals.
o = Open(tree, "fine.txt")
o.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_ALL, FileAttributes.FILE_ATTRIBUTE_NORMAL,
         ShareAccess.FILE_SHARE_READ, CreateDisposition.FILE_OVERWRITE_IF, CreateOptions.FILE_NON_DIRECTORY_FILE)
o.write(b"ok", 0)
assert o.read(0, 2) == b"ok"
o.close()
tree.disconnect(); sess.disconnect(); conn.disconnect()
print("OK")
"#;

const SMBPROTOCOL_5000: &str = r#"
import os
import smbclient
port = int(os.environ["PORT"])
smbclient.register_session("127.0.0.1", username=os.environ["SMBUSER"], password=os.environ["SMBPASS"], port=port, encrypt=True)
root = r"\\127.0.0.1\data\many"
smbclient.mkdir(root, port=port)
names = {"file-%05d.dat" % i for i in range(5000)}
for n in names:
    with smbclient.open_file(root + "\\" + n, mode="wb", port=port) as f:
        pass
listed = smbclient.listdir(root, port=port)
assert len(listed) == 5000 and set(listed) == names, len(listed)
print("OK", len(listed))
"#;

#[test]
fn smbprotocol_encrypted_operations() {
    let q = setup();
    let out = python(&q, SMBPROTOCOL_OPS);
    assert!(out.contains("OK"), "{out}");
}

#[test]
fn smbprotocol_refuses_escapes_and_illegal_names() {
    let q = setup();
    let out = python(&q, SMBPROTOCOL_ESCAPES);
    assert!(out.contains("OK"), "{out}");
}

#[test]
fn smbprotocol_lists_5000_files() {
    let q = setup();
    let out = python(&q, SMBPROTOCOL_5000);
    assert!(out.contains("OK 5000"), "{out}");
}

const IMPACKET: &str = r#"
import os, io, sys
import impacket
from impacket.smbconnection import SMBConnection
from impacket.smb3structs import SMB2_DIALECT_311
port = int(os.environ["PORT"])
for mode in ("smb1-upgrade", "3.1.1"):
    kw = {} if mode == "smb1-upgrade" else {"preferredDialect": SMB2_DIALECT_311}
    c = SMBConnection("127.0.0.1", "127.0.0.1", sess_port=port, **kw)
    assert c.getDialect() == SMB2_DIALECT_311, hex(c.getDialect())
    c.login(os.environ["SMBUSER"], os.environ["SMBPASS"])
    body = (mode.encode() + b" impacket data\n") * 5000
    c.putFile("data", "imp.txt", io.BytesIO(body).read)
    names = [f.get_longname() for f in c.listPath("data", "*")]
    assert "imp.txt" in names, names
    buf = io.BytesIO()
    c.getFile("data", "imp.txt", buf.write)
    assert buf.getvalue() == body
    c.deleteFile("data", "imp.txt")
    c.logoff()
    print(mode, "OK")
"#;

#[test]
fn impacket_smb1_upgrade_and_311() {
    let q = setup();
    let out = python(&q, IMPACKET);
    assert!(
        out.contains("smb1-upgrade OK") && out.contains("3.1.1 OK"),
        "{out}"
    );
}

/// Two opens of one file: a conflicting share mode is refused with SHARING_VIOLATION, and a
/// refused truncating open (OVERWRITE_IF) must not have truncated anything. The name is
/// also spelled in other cases: the cached open takes only the stored spelling, so those
/// CREATEs probe on the blocking pool, where the probe tries to create the file first and
/// must then still settle share modes before truncating.
const SMBPROTOCOL_SHARING: &str = r#"
from quarry_smb import smb_tree
from smbprotocol.open import Open, CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, ShareAccess, FileAttributes
from smbprotocol.exceptions import SMBResponseException
conn, sess, tree = smb_tree()
def op(disp, share, name="shared.bin"):
    o = Open(tree, name)
    o.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
             FileAttributes.FILE_ATTRIBUTE_NORMAL, share, disp, CreateOptions.FILE_NON_DIRECTORY_FILE)
    return o
a = op(CreateDisposition.FILE_OVERWRITE_IF, 0)
a.write(b"precious", 0)
for name in ("shared.bin", "SHARED.BIN", "Shared.Bin"):
    for disp in (CreateDisposition.FILE_OVERWRITE_IF, CreateDisposition.FILE_OPEN, CreateDisposition.FILE_SUPERSEDE):
        try:
            op(disp, ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE, name)
            raise SystemExit("second open allowed: %s" % name)
        except SMBResponseException as e:
            assert e.status == 0xC0000043, (name, hex(e.status))
        assert a.read(0, 8) == b"precious", "data lost by a refused open of %s" % name
a.close()
b = op(CreateDisposition.FILE_OPEN, ShareAccess.FILE_SHARE_READ)
assert b.read(0, 8) == b"precious"
b.close()
tree.disconnect(); sess.disconnect(); conn.disconnect()
print("OK")
"#;

#[test]
fn smbprotocol_sharing_violation_keeps_data() {
    let q = setup();
    let out = python(&q, SMBPROTOCOL_SHARING);
    assert!(out.contains("OK"), "{out}");
}

/// Every disposition reports the action it took, on a missing and on an existing file,
/// first with no oplock in the share and then while another client holds a batch oplock on
/// an unrelated file: then every CREATE first probes the file for breaks, and a probe that
/// finds nothing creates the file in the same storage call. Data, delete-on-close and
/// name collisions must come out the same both ways.
const SMBPROTOCOL_CREATE_ACTIONS: &str = r#"
from quarry_smb import smb_tree
from smbprotocol.open import (Open, CreateAction, CreateDisposition as D, CreateOptions,
    FilePipePrinterAccessMask as A, ImpersonationLevel, ShareAccess, FileAttributes,
    RequestedOplockLevel)
from smbprotocol.exceptions import SMBResponseException
def tree():
    conn, sess, t = smb_tree()
    return t
RW = A.FILE_READ_DATA | A.FILE_WRITE_DATA | A.DELETE
SHARE = ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE | ShareAccess.FILE_SHARE_DELETE
def op(t, name, disp, options=0, oplock=RequestedOplockLevel.SMB2_OPLOCK_LEVEL_NONE):
    o = Open(t, name)
    o.create(ImpersonationLevel.Impersonation, RW, FileAttributes.FILE_ATTRIBUTE_NORMAL, SHARE, disp,
             CreateOptions.FILE_NON_DIRECTORY_FILE | options, oplock_level=oplock)
    return o
def exists(t, name):
    try:
        op(t, name, D.FILE_OPEN).close(); return True
    except SMBResponseException as e:
        assert e.status == 0xC0000034, hex(e.status); return False
def round(t, tag):
    cases = [(D.FILE_OVERWRITE_IF, CreateAction.FILE_CREATED, CreateAction.FILE_OVERWRITTEN),
             (D.FILE_SUPERSEDE, CreateAction.FILE_CREATED, CreateAction.FILE_SUPERSEDED),
             (D.FILE_OPEN_IF, CreateAction.FILE_CREATED, CreateAction.FILE_OPENED),
             (D.FILE_CREATE, CreateAction.FILE_CREATED, None)]
    for i, (disp, missing, existing) in enumerate(cases):
        name = "%s-%d.bin" % (tag, i)
        o = op(t, name, disp)
        assert o.create_action == missing, (tag, disp, o.create_action)
        o.write(b"first contents", 0); o.close()
        if existing is None:
            try:
                op(t, name, disp); raise SystemExit("CREATE of an existing file succeeded")
            except SMBResponseException as e:
                assert e.status == 0xC0000035, hex(e.status)
            continue
        o = op(t, name, disp)
        assert o.create_action == existing, (tag, disp, o.create_action)
        data = o.read(0, 14) if o.end_of_file else b""
        assert data == (b"first contents" if existing == CreateAction.FILE_OPENED else b""), (tag, disp, data)
        o.close()
    # A file created with delete-on-close is gone after its close.
    name = "%s-doc.bin" % tag
    o = op(t, name, D.FILE_OVERWRITE_IF, CreateOptions.FILE_DELETE_ON_CLOSE)
    assert o.create_action == CreateAction.FILE_CREATED
    o.close()
    assert not exists(t, name), name
t = tree()
round(t, "plain")
holder = op(tree(), "held.bin", D.FILE_OVERWRITE_IF, oplock=RequestedOplockLevel.SMB2_OPLOCK_LEVEL_BATCH)
assert holder.oplock_level == RequestedOplockLevel.SMB2_OPLOCK_LEVEL_BATCH, holder.oplock_level
round(t, "granted")
holder.close()
print("OK")
"#;

#[test]
fn smbprotocol_create_actions_hold_with_and_without_oplocks_in_the_share() {
    let q = setup();
    let out = python(&q, SMBPROTOCOL_CREATE_ACTIONS);
    assert!(out.contains("OK"), "{out}");
}

/// Opens from different connections never share a FileId: share modes (and byte-range
/// locks) of every connection live in one per-share table keyed by it. Each connection's
/// first open below got volatile id 1 when ids were counted per connection; the reader's
/// entry then vanished with the writer's close and a third open was refused.
const SMBPROTOCOL_OPENS_ACROSS_CONNECTIONS: &str = r#"
from quarry_smb import smb_tree
from smbprotocol.open import Open, CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, ShareAccess, FileAttributes
from smbprotocol.exceptions import SMBResponseException
def tree():
    conn, sess, t = smb_tree()
    return t
R, W = FilePipePrinterAccessMask.FILE_READ_DATA, FilePipePrinterAccessMask.FILE_WRITE_DATA
def op(t, access, share, disp=CreateDisposition.FILE_OPEN):
    o = Open(t, "across.bin")
    o.create(ImpersonationLevel.Impersonation, access, FileAttributes.FILE_ATTRIBUTE_NORMAL, share, disp,
             CreateOptions.FILE_NON_DIRECTORY_FILE)
    return o
rw = ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE
setup = op(tree(), R | W, rw, CreateDisposition.FILE_OVERWRITE_IF); setup.close()
reader = op(tree(), R, rw)
writer = op(tree(), R | W, rw)
writer.close()
# Only the reader is open now: a writer that shares reading only is compatible with it.
third = op(tree(), R | W, ShareAccess.FILE_SHARE_READ)
third.close()
# And the reader's entry is still there: an open that shares nothing is refused.
try:
    op(tree(), R, 0)
    raise SystemExit("exclusive open allowed while the reader is open")
except SMBResponseException as e:
    assert e.status == 0xC0000043, hex(e.status)
reader.close()
print("OK")
"#;

#[test]
fn opens_on_different_connections_keep_their_own_share_modes() {
    let q = setup();
    let out = python(&q, SMBPROTOCOL_OPENS_ACROSS_CONNECTIONS);
    assert!(out.contains("OK"), "{out}");
}

/// A durable v2 open with a batch oplock writes 4 MiB; its TCP connection is destroyed
/// (`ss -K`); a new connection and session reclaim the same open (DH2C, same FileId and
/// CreateGuid), write 4 MiB more after the first and read all 8 MiB back.
const SMBPROTOCOL_DURABLE_RECONNECT: &str = r#"
import os, uuid, subprocess, time
from quarry_smb import smb_tree
from smbprotocol.open import Open, CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, ShareAccess, FileAttributes, RequestedOplockLevel
from smbprotocol.create_contexts import CreateContextName, SMB2CreateContextRequest, SMB2CreateDurableHandleRequestV2, SMB2CreateDurableHandleReconnectV2
from smbprotocol.exceptions import SMBResponseException
port = int(os.environ["PORT"])
guid = uuid.uuid4()
def connect():
    conn, sess, tree = smb_tree(require_encryption=False)
    return conn, tree
def context(name, data):
    c = SMB2CreateContextRequest(); c["buffer_name"] = name; c["buffer_data"] = data; return c
def create(tree, contexts):
    o = Open(tree, "ckpt.bin")
    got = o.create(ImpersonationLevel.Impersonation,
                   FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
                   FileAttributes.FILE_ATTRIBUTE_NORMAL, ShareAccess.FILE_SHARE_READ,
                   CreateDisposition.FILE_OVERWRITE_IF, CreateOptions.FILE_NON_DIRECTORY_FILE,
                   create_contexts=contexts, oplock_level=RequestedOplockLevel.SMB2_OPLOCK_LEVEL_BATCH)
    return o, got
conn, tree = connect()
req = SMB2CreateDurableHandleRequestV2(); req["timeout"] = 60000; req["create_guid"] = guid
o, got = create(tree, [context(CreateContextName.SMB2_CREATE_DURABLE_HANDLE_REQUEST_V2, req)])
assert any(type(c).__name__ == "SMB2CreateDurableHandleResponseV2" for c in (got or [])), got
part1 = os.urandom(4 * 1024 * 1024)
o.write(part1, 0)
file_id = o.file_id
subprocess.run(["ss", "-K", "dst", "127.0.0.1", "dport", "=", str(port)], check=True, capture_output=True)
try:
    o.write(b"lost", 0)
    raise SystemExit("a write on the destroyed connection succeeded")
except SystemExit:
    raise
except Exception as e:
    print("write on the cut connection failed:", type(e).__name__)
conn2, tree2 = connect()
rc = SMB2CreateDurableHandleReconnectV2(); rc["file_id"] = file_id; rc["create_guid"] = guid
for attempt in range(20):
    try:
        o2, _ = create(tree2, [context(CreateContextName.SMB2_CREATE_DURABLE_HANDLE_RECONNECT_V2, rc)])
        break
    except SMBResponseException as e:
        # The server may not have seen the old connection die yet.
        assert e.status == 0xC0000034, hex(e.status)
        time.sleep(0.1)
else:
    raise SystemExit("the durable handle was never reclaimed")
assert o2.file_id == file_id, (o2.file_id, file_id)
part2 = os.urandom(4 * 1024 * 1024)
o2.write(part2, len(part1))
back = o2.read(0, 4 * 1024 * 1024) + o2.read(4 * 1024 * 1024, 4 * 1024 * 1024)
assert back == part1 + part2, "data differs after the reconnect"
o2.close()
print("OK reclaimed after", attempt, "retries")
"#;

#[test]
fn smbprotocol_durable_handle_survives_a_destroyed_connection() {
    let q = setup();
    let out = python(&q, SMBPROTOCOL_DURABLE_RECONNECT);
    assert!(out.contains("OK reclaimed"), "{out}");
}

/// Phase one of the persistent-handle test: a persistent handle on a continuously
/// available share, written, then left open (the process exits without closing it).
const SMBPROTOCOL_PERSISTENT_OPEN: &str = r#"
import os, uuid
from quarry_smb import smb_tree
from smbprotocol.open import Open, CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, ShareAccess, FileAttributes, RequestedOplockLevel
from smbprotocol.create_contexts import CreateContextName, SMB2CreateContextRequest, SMB2CreateDurableHandleRequestV2, DurableHandleFlags
client = uuid.UUID(os.environ["CLIENT_GUID"]); guid = uuid.UUID(os.environ["CREATE_GUID"])
conn, sess, tree = smb_tree("ca", client_guid=client)
assert tree.is_ca_share, "the share is not continuously available"
req = SMB2CreateDurableHandleRequestV2(); req["timeout"] = 120000; req["create_guid"] = guid
req["flags"] = DurableHandleFlags.SMB2_DHANDLE_FLAG_PERSISTENT
c = SMB2CreateContextRequest(); c["buffer_name"] = CreateContextName.SMB2_CREATE_DURABLE_HANDLE_REQUEST_V2; c["buffer_data"] = req
o = Open(tree, "ckpt.bin")
got = o.create(ImpersonationLevel.Impersonation,
               FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
               FileAttributes.FILE_ATTRIBUTE_NORMAL, ShareAccess.FILE_SHARE_READ,
               CreateDisposition.FILE_OVERWRITE_IF, CreateOptions.FILE_NON_DIRECTORY_FILE,
               create_contexts=[c], oplock_level=RequestedOplockLevel.SMB2_OPLOCK_LEVEL_NONE)
resp = [x for x in (got or []) if type(x).__name__ == "SMB2CreateDurableHandleResponseV2"]
assert resp and resp[0]["flags"].get_value() & 2, "no persistent handle granted: %r" % got
o.write(b"A" * 1048576, 0)
from smbprotocol.open import SMB2LockElement, LockFlags
e = SMB2LockElement(); e["offset"] = 0; e["length"] = 4096
e["flags"] = LockFlags.SMB2_LOCKFLAG_EXCLUSIVE_LOCK | LockFlags.SMB2_LOCKFLAG_FAIL_IMMEDIATELY
o.lock([e])
print("FILEID", o.file_id.hex())
os._exit(0)
"#;

/// Phase two: after the restart, the same client reclaims the handle and goes on; its
/// byte-range lock held all along.
const SMBPROTOCOL_PERSISTENT_RECLAIM: &str = r#"
import os, uuid
from quarry_smb import smb_tree
from smbprotocol.open import Open, CreateDisposition, CreateOptions, FilePipePrinterAccessMask, ImpersonationLevel, ShareAccess, FileAttributes, RequestedOplockLevel
from smbprotocol.create_contexts import CreateContextName, SMB2CreateContextRequest, SMB2CreateDurableHandleReconnectV2, DurableHandleFlags
from smbprotocol.exceptions import SMBResponseException
client = uuid.UUID(os.environ["CLIENT_GUID"]); guid = uuid.UUID(os.environ["CREATE_GUID"])
def connect(client):
    conn, sess, tree = smb_tree("ca", client_guid=client)
    return tree
def open_plain(tree):
    o = Open(tree, "ckpt.bin")
    o.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_WRITE,
             FileAttributes.FILE_ATTRIBUTE_NORMAL, ShareAccess.FILE_SHARE_READ,
             CreateDisposition.FILE_OPEN, CreateOptions.FILE_NON_DIRECTORY_FILE)
def open_reader(tree):
    o = Open(tree, "ckpt.bin")
    o.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_READ,
             FileAttributes.FILE_ATTRIBUTE_NORMAL, ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE,
             CreateDisposition.FILE_OPEN, CreateOptions.FILE_NON_DIRECTORY_FILE)
    return o
def lock_conflict(o, offset):
    try:
        o.read(offset, 4096)
        return False
    except SMBResponseException as e:
        assert e.status == 0xC0000054, hex(e.status)
        return True
tree = connect(client)
# The restored handle still holds its byte-range lock: another client's read of the
# locked range conflicts, a read beside it does not.
reader = open_reader(connect(uuid.uuid4()))
assert lock_conflict(reader, 0), "the exclusive lock was lost in the restart"
assert not lock_conflict(reader, 8192)
# The restored handle still holds its share mode: another writer is refused.
try:
    open_plain(connect(uuid.uuid4()))
    raise SystemExit("a conflicting open was allowed while the persistent handle waits")
except SMBResponseException as e:
    assert e.status == 0xC0000043, hex(e.status)
rc = SMB2CreateDurableHandleReconnectV2(); rc["file_id"] = bytes.fromhex(os.environ["FILEID"]); rc["create_guid"] = guid
rc["flags"] = DurableHandleFlags.SMB2_DHANDLE_FLAG_PERSISTENT
c = SMB2CreateContextRequest(); c["buffer_name"] = CreateContextName.SMB2_CREATE_DURABLE_HANDLE_RECONNECT_V2; c["buffer_data"] = rc
o = Open(tree, "ckpt.bin")
o.create(ImpersonationLevel.Impersonation,
         FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
         FileAttributes.FILE_ATTRIBUTE_NORMAL, ShareAccess.FILE_SHARE_READ,
         CreateDisposition.FILE_OPEN, CreateOptions.FILE_NON_DIRECTORY_FILE,
         create_contexts=[c], oplock_level=RequestedOplockLevel.SMB2_OPLOCK_LEVEL_NONE)
assert o.file_id.hex() == os.environ["FILEID"], (o.file_id.hex(), os.environ["FILEID"])
o.write(b"B" * 1048576, 1048576)
back = o.read(0, 1048576) + o.read(1048576, 1048576)
assert back == b"A" * 1048576 + b"B" * 1048576, "data differs after the restart"
# The owner, reclaimed, still owns the lock and releases it.
from smbprotocol.open import SMB2LockElement, LockFlags
u = SMB2LockElement(); u["offset"] = 0; u["length"] = 4096; u["flags"] = LockFlags.SMB2_LOCKFLAG_UNLOCK
o.lock([u])
assert not lock_conflict(reader, 0), "unlocked, yet the range still conflicts"
reader.close()
o.close()
# Closed for good: the file is free again.
open_plain(connect(uuid.uuid4()))
print("OK reclaimed after the restart")
"#;

#[test]
fn smbprotocol_persistent_handle_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let q = QuarryProcess::start_in(&data).expect("quarry starts");
    let api = q.admin().expect("admin login");
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))
        .unwrap();
    let b = api
        .create(
            "/api/v1/shares",
            &json!({"name": "ca", "continuously_available": true}),
        )
        .unwrap();
    assert_eq!(b["continuously_available"], true, "{b}");
    let ids = [
        ("CLIENT_GUID", "6d3c1c0e-1f5e-4a7b-9c1d-0a0b0c0d0e0f"),
        ("CREATE_GUID", "0f0e0d0c-0b0a-4c1d-8b7a-5e1f0e1c3c6d"),
    ];
    let out = python_with(&q, SMBPROTOCOL_PERSISTENT_OPEN, &ids);
    let file_id = out
        .lines()
        .find_map(|l| l.strip_prefix("FILEID "))
        .unwrap_or_else(|| panic!("no handle: {out}"))
        .trim()
        .to_string();
    // A service restart (SIGTERM), not a dropped connection.
    assert_eq!(q.stop().expect("stops"), 0);
    let q = QuarryProcess::start_in(&data).expect("quarry restarts");
    let mut env = ids.to_vec();
    env.push(("FILEID", &file_id));
    let out = python_with(&q, SMBPROTOCOL_PERSISTENT_RECLAIM, &env);
    assert!(out.contains("OK reclaimed"), "{out}");
}

const SMBPROTOCOL_NOTIFY_OUTSIDE: &str = r#"
import os, subprocess, threading, time
from quarry_smb import smb_tree
from smbprotocol.open import (Open, CreateDisposition, CreateOptions, DirectoryAccessMask,
    FileAttributes, ImpersonationLevel, ShareAccess)
from smbprotocol.change_notify import ChangeNotifyFlags, CompletionFilter, FileSystemWatcher

conn, sess, tree = smb_tree()
d = Open(tree, "Watched")
d.create(ImpersonationLevel.Impersonation,
         DirectoryAccessMask.FILE_LIST_DIRECTORY | DirectoryAccessMask.SYNCHRONIZE,
         FileAttributes.FILE_ATTRIBUTE_DIRECTORY,
         ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE | ShareAccess.FILE_SHARE_DELETE,
         CreateDisposition.FILE_OPEN, CreateOptions.FILE_DIRECTORY_FILE)

def watch_while(script):
    w = FileSystemWatcher(d)
    w.start(CompletionFilter.FILE_NOTIFY_CHANGE_FILE_NAME | CompletionFilter.FILE_NOTIFY_CHANGE_DIR_NAME,
            flags=ChangeNotifyFlags.SMB2_WATCH_TREE)
    # The watch stands once the server has answered STATUS_PENDING.
    deadline = time.time() + 10
    while w._request.async_id is None and time.time() < deadline:
        time.sleep(0.01)
    assert w._request.async_id is not None, "no interim response"
    # Another process changes the share's directory on the appliance itself.
    subprocess.run(["sh", "-c", script], cwd=os.environ["SHARE_DIR"], check=True)
    t = threading.Thread(target=w.wait, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "no notification within 10 s of the outside change"
    return [(a["action"].get_value(), a["file_name"].get_value()) for a in w.result]

got = watch_while("echo hi > Watched/Sub/outside.txt")
print("CREATE", got)
assert (1, "Sub\\outside.txt") in got, got
got = watch_while("mv Watched/Sub/outside.txt Watched/renamed.txt")
print("MOVE", got)
assert (2, "Sub\\outside.txt") in got and (1, "renamed.txt") in got, got
got = watch_while("mv Watched/renamed.txt Watched/again.txt")
print("RENAME", got)
assert (4, "renamed.txt") in got and (5, "again.txt") in got, got
d.close()
print("OK outside changes notified")
"#;

/// A change made on the appliance itself, by another process, completes a client's
/// CHANGE_NOTIFY: a new file in a watched subtree, a move out of a subdirectory and a
/// rename in place (FILE_ACTION_ADDED, REMOVED/ADDED, RENAMED_OLD/NEW_NAME).
#[test]
fn smbprotocol_is_notified_of_changes_made_outside_smb() {
    let q = setup();
    let share_dir = data_dir(&q);
    std::fs::create_dir_all(share_dir.join("Watched/Sub")).unwrap();
    let out = python_with(
        &q,
        SMBPROTOCOL_NOTIFY_OUTSIDE,
        &[("SHARE_DIR", share_dir.to_str().unwrap())],
    );
    assert!(out.contains("OK outside changes notified"), "{out}");
}

/// An Apple client's AAPL server query on its first CREATE, then a listing with
/// FileIdBothDirectoryInformation carrying the Apple fields (maximal access, UNIX mode, and
/// the resource fork length and compressed FinderInfo from the file's AFP_Resource and
/// AFP_AfpInfo streams) and file ids of 0; a later query does not renegotiate, a malformed
/// AAPL context or kAAPL_RESOLVE_ID is INVALID_PARAMETER, and a connection that never
/// negotiates gets plain entries.
const SMBPROTOCOL_AAPL: &str = r#"
import struct
from quarry_smb import smb_tree
from smbprotocol.open import Open, CreateDisposition, CreateOptions, DirectoryAccessMask, FilePipePrinterAccessMask, ImpersonationLevel, ShareAccess, FileAttributes, FileInformationClass
from smbprotocol.create_contexts import SMB2CreateContextRequest
from smbprotocol.exceptions import SMBResponseException
def connect():
    conn, sess, tree = smb_tree()
    return tree
def aapl(data):
    c = SMB2CreateContextRequest(); c["buffer_name"] = b"AAPL"; c["buffer_data"] = data
    return c
def open_root(tree, contexts=None):
    o = Open(tree, "")
    got = o.create(ImpersonationLevel.Impersonation,
                   DirectoryAccessMask.FILE_LIST_DIRECTORY | DirectoryAccessMask.FILE_READ_ATTRIBUTES,
                   FileAttributes.FILE_ATTRIBUTE_DIRECTORY, ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE,
                   CreateDisposition.FILE_OPEN, CreateOptions.FILE_DIRECTORY_FILE, create_contexts=contexts)
    return o, got
def listing(o):
    entries = o.query_directory("*", FileInformationClass.FILE_ID_BOTH_DIRECTORY_INFORMATION)
    return {e["file_name"].get_value().decode("utf-16-le"): e for e in entries}
# kAAPL_SERVER_QUERY: server caps | volume caps | model; client: read-dir-attr | unix | nfs ace.
query = struct.pack("<IIQQ", 1, 0, 7, 1 | 4 | 8)
tree = connect()
o, got = open_root(tree, [aapl(query)])
assert got and len(got) == 1, got
reply = got[0]
cmd, _, bitmap, scaps, vcaps, _, mlen = struct.unpack_from("<IIQQQII", reply)
model = reply[40:40 + mlen].decode("utf-16-le")
print("AAPL reply", cmd, bitmap, hex(scaps), hex(vcaps), model)
assert (cmd, bitmap) == (1, 7), (cmd, bitmap)
assert scaps == 1 | 4, hex(scaps)        # read-dir-attr | unix based; no copyfile, no NFS ACEs
assert vcaps == 4, hex(vcaps)            # full sync; case-insensitive, no resolve-id
assert model == "Quarry" and len(reply) == 40 + mlen, (model, len(reply))
# Finder metadata as macOS stores it: an AfpInfo stream and a resource fork.
def write_stream(name, data):
    s = Open(tree, name)
    s.create(ImpersonationLevel.Impersonation, FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
             FileAttributes.FILE_ATTRIBUTE_NORMAL, ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE,
             CreateDisposition.FILE_OVERWRITE_IF, CreateOptions.FILE_NON_DIRECTORY_FILE)
    s.write(data, 0); s.close()
finder = b"TEXTttxt" + b"\x40\x00" + b"\0" * 14 + b"\x00\x20" + b"\0" * 6
afp = b"AFP\0" + b"\0\0\x01\0" + b"\0" * 8 + finder + b"\0" * 12
assert len(afp) == 60
write_stream("mac.txt", b"data")
write_stream("mac.txt:AFP_AfpInfo", afp)
write_stream("mac.txt:AFP_Resource", b"R" * 1000)
entries = listing(o)
m = entries["mac.txt"]
short = m["short_name"].get_value()
created = int(m["creation_time"].get_value().timestamp())
print("mac.txt short name area", short.hex())
assert struct.unpack_from("<Q", short)[0] == 1000, short.hex()
assert short[8:20] == b"TEXTttxt\x40\x00\x00\x20", short.hex()
assert struct.unpack_from(">i", short, 20)[0] == created - 946684800, (short.hex(), created)
f = entries["mode640.txt"]
mode = f["reserved2"].get_value()
print("mode640.txt mode", oct(mode), "ea_size", hex(f["ea_size"].get_value()))
assert mode == 0o100640, oct(mode)
assert f["ea_size"].get_value() == 0x001F01FF, hex(f["ea_size"].get_value())
assert f["short_name_length"].get_value() == 24
short = f["short_name"].get_value()
assert struct.unpack_from("<Q", short)[0] == 0, short      # no resource fork
assert short[8:20] == b"\0" * 12 and short[20:24] == b"\x80\0\0\0", short.hex()
# Inode numbers are reused, macOS takes file ids for CNIDs: an AAPL connection sees 0.
assert all(e["file_id"].get_value() == 0 for e in entries.values()), [e["file_id"].get_value() for e in entries.values()]
d = entries["sub"]
assert d["reserved2"].get_value() == 0o040755, oct(d["reserved2"].get_value())
o.close()
# A second query on the same connection is answered the same and changes nothing.
o, got = open_root(tree, [aapl(struct.pack("<IIQQ", 1, 0, 1, 0))])
assert struct.unpack_from("<IIQQ", got[0]) == (1, 0, 1, 5), got[0].hex()
o.close()
# A malformed context is refused; so is kAAPL_RESOLVE_ID, which Quarry does not offer.
for bad in (query[:20], query + b"\0", struct.pack("<IIQ", 2, 0, 1234)):
    try:
        open_root(tree, [aapl(bad)])
        raise SystemExit("accepted AAPL " + bad.hex())
    except SMBResponseException as e:
        assert e.status == 0xC000000D, hex(e.status)
# Another connection without AAPL lists plain entries.
o, got = open_root(connect())
f = listing(o)["mode640.txt"]
assert f["reserved2"].get_value() == 0 and f["ea_size"].get_value() == 0, (f["reserved2"], f["ea_size"])
assert f["short_name_length"].get_value() == 0
assert f["file_id"].get_value() != 0
o.close()
print("OK")
"#;

#[test]
fn smbprotocol_aapl_negotiates_and_lists_apple_fields() {
    use std::os::unix::fs::PermissionsExt;
    let q = setup();
    let share = data_dir(&q);
    std::fs::write(share.join("mode640.txt"), b"x").unwrap();
    std::fs::set_permissions(
        share.join("mode640.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::fs::create_dir(share.join("sub")).unwrap();
    std::fs::set_permissions(share.join("sub"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = python(&q, SMBPROTOCOL_AAPL);
    assert!(
        out.contains("mac.txt short name area") && out.contains("OK"),
        "{out}"
    );
    println!("{out}");
}

/// A veth pair in the host's namespace, removed on drop.
struct Veth {
    name: String,
}

impl Veth {
    fn create(name: &str, peer: &str, addr: IpAddr) -> Veth {
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip runs");
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let _ = Command::new("ip").args(["link", "del", name]).output();
        ip(&[
            "link",
            "add",
            name,
            "numtxqueues",
            "4",
            "numrxqueues",
            "4",
            "type",
            "veth",
            "peer",
            "name",
            peer,
        ]);
        let v = Veth {
            name: name.to_string(),
        };
        ip(&["addr", "add", &format!("{addr}/32"), "dev", name]);
        ip(&["link", "set", name, "up"]);
        ip(&["link", "set", peer, "up"]);
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.name])
            .output();
    }
}

const QUERY_INTERFACES: &str = r#"
from quarry_smb import smb_tree
from smbprotocol.ioctl import (CtlCode, IOCTLFlags, SMB2IOCTLRequest, SMB2IOCTLResponse,
    SMB2NetworkInterfaceInfo)
conn, sess, tree = smb_tree()
req = SMB2IOCTLRequest()
req["ctl_code"] = CtlCode.FSCTL_QUERY_NETWORK_INTERFACE_INFO
req["file_id"] = b"\xff" * 16
req["max_input_response"] = 0
req["max_output_response"] = 65536
req["flags"] = IOCTLFlags.SMB2_0_IOCTL_IS_FSCTL
resp = conn.receive(conn.send(req, sid=sess.session_id, tid=tree.tree_connect_id))
ioctl = SMB2IOCTLResponse()
ioctl.unpack(resp["data"].get_value())
for i in SMB2NetworkInterfaceInfo.unpack_multiple(ioctl["buffer"].get_value()):
    addr = i["sock_addr_storage"]["buffer"].get_value().get_ipaddress()
    print("IF", addr, i["link_speed"].get_value(), i["capability"].get_value())
"#;

/// FSCTL_QUERY_NETWORK_INTERFACE_INFO with quarry listening on 127.0.0.1 and on an
/// address of a veth made for the test (4 receive queues, the 10 Gb/s veth reports in
/// sysfs): each address comes with its NIC's facts, the veth's 10 Gb/s and RSS_CAPABLE,
/// loopback's unknown speed as 1 Gb/s and no RSS. Needs root, as the suite does.
#[test]
fn interfaces_report_their_nics_speed_and_rss() {
    let pid = std::process::id();
    let addr: IpAddr = [10, 77, (pid % 250) as u8, 1].into();
    let _veth = Veth::create(
        &format!("qtn{:x}", pid & 0xFFFFF),
        &format!("qtp{:x}", pid & 0xFFFFF),
        addr,
    );
    let dir = tempfile::tempdir().unwrap();
    let q = with_user_and_share(
        QuarryProcess::start_with_smb_also(&dir.path().join("data"), &[], &[addr])
            .expect("quarry starts"),
    );
    let text = python(&q, QUERY_INTERFACES);
    let entries: Vec<(String, u64, u32)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("IF ")?.split_whitespace();
            Some((
                f.next()?.to_string(),
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
            ))
        })
        .collect();
    assert!(
        entries.contains(&("127.0.0.1".into(), 1_000_000_000, 0)),
        "loopback: unknown speed (1 Gb/s), no RSS: {entries:?}"
    );
    assert!(
        entries.contains(&(addr.to_string(), 10_000_000_000, 1)),
        "the veth: 10 Gb/s from sysfs, RSS_CAPABLE from its 4 receive queues: {entries:?}"
    );
}

const SMBPROTOCOL_BIG_STREAM: &str = r#"
import os, smbclient
port = int(os.environ["PORT"])
smbclient.register_session("127.0.0.1", username=os.environ["SMBUSER"], password=os.environ["SMBPASS"], port=port)
root = r"\\127.0.0.1\data"
data = os.urandom(3 * 1024 * 1024 + 7)
with smbclient.open_file(root + r"\mac.bin", mode="wb", port=port) as f:
    f.write(b"data fork")
with smbclient.open_file(root + r"\mac.bin:AFP_Resource", mode="wb", port=port) as f:
    f.write(data)
with smbclient.open_file(root + r"\mac.bin:AFP_Resource", mode="rb", port=port) as f:
    back = f.read()
assert back == data, "stream read back differs (%d of %d bytes)" % (len(back), len(data))
with smbclient.open_file(root + r"\mac.bin", mode="rb", port=port) as f:
    assert f.read() == b"data fork"
names = smbclient.listdir(root, port=port)
assert not any(n.lower() == ".quarry-streams" for n in names), names
print("SIDE", len(os.listdir(os.environ["SIDE_DIR"])))
smbclient.remove(root + r"\mac.bin", port=port)
print("SIDE_AFTER", len(os.listdir(os.environ["SIDE_DIR"])))
print("OK big stream")
"#;

/// A 3 MiB stream (a macOS resource fork's size, beyond any xattr) written and read back
/// through smbprotocol: kept in the share's hidden side store, never listed, and removed
/// with its file.
#[test]
fn smbprotocol_keeps_streams_larger_than_an_xattr() {
    let q = setup();
    let side = data_dir(&q).join(".quarry-streams");
    let out = python_with(
        &q,
        SMBPROTOCOL_BIG_STREAM,
        &[("SIDE_DIR", side.to_str().unwrap())],
    );
    assert!(out.contains("SIDE 1\n"), "{out}");
    assert!(out.contains("SIDE_AFTER 0\n"), "{out}");
    assert!(out.contains("OK big stream"), "{out}");
}
