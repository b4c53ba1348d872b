//! FSCTL_QUERY_NETWORK_INTERFACE_INFO against the real `quarry` binary, asked by python
//! smbprotocol: the server listens on 127.0.0.1 and on an address of a veth interface made
//! for the test (4 receive queues, the 10 Gb/s link speed veth reports in sysfs), and
//! reports each address with the facts of the NIC holding it: the veth's 10 Gb/s and
//! RSS_CAPABLE, loopback's unknown speed as 1 Gb/s and no RSS.
//!
//! Needs root (to create the interface), as the rest of the suite does.

use std::net::IpAddr;
use std::process::Command;

use quarry_tests::QuarryProcess;
use serde_json::json;

const USER: &str = "nic";
const PASS: &str = "nic-secret-4";

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
import os, uuid
from smbprotocol.connection import Connection
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect
from smbprotocol.ioctl import (CtlCode, IOCTLFlags, SMB2IOCTLRequest, SMB2IOCTLResponse,
    SMB2NetworkInterfaceInfo)
conn = Connection(uuid.uuid4(), "127.0.0.1", int(os.environ["PORT"]))
conn.connect()
sess = Session(conn, os.environ["SMBUSER"], os.environ["SMBPASS"])
sess.connect()
tree = TreeConnect(sess, r"\\127.0.0.1\data")
tree.connect()
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
    let q = QuarryProcess::start_with_smb_also(&dir.path().join("data"), &[], &[addr])
        .expect("quarry starts");
    let api = q.admin().expect("admin login");
    let (s, b) = api
        .post("/api/v1/users", &json!({"name": USER, "password": PASS}))
        .unwrap();
    assert_eq!(s, 201, "{b}");
    let (s, b) = api
        .post("/api/v1/shares", &json!({"name": "data", "users": [USER]}))
        .unwrap();
    assert_eq!(s, 201, "{b}");
    let out = Command::new("python3")
        .args(["-c", QUERY_INTERFACES])
        .env("PORT", q.smb.port().to_string())
        .env("SMBUSER", USER)
        .env("SMBPASS", PASS)
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
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
