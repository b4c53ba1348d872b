//! Hostile SMB clients against the real `quarry` binary, on the paths that large
//! messages take (they are read into pooled buffers placed from their first bytes): an
//! oversized frame length, a large WRITE before any session, a large message cut short, a
//! large sealed message for no session, and large garbage. Each gets an error answer or a
//! closed connection within 10 s, never a hang. A real client (the `smb` crate) whose
//! session was opened before the attacks writes and reads a file in 1 MiB pieces before and
//! after them, a new client does the same afterwards, and nothing in the server panicked.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::str::FromStr;
use std::time::Duration;

use quarry_tests::smb_workloads::write_then_read_back;
use quarry_tests::{xorshift_bytes, QuarryProcess};
use serde_json::json;
use smb::{Client, ClientConfig, UncPath};

const USER: &str = "mallory-victim";
const PASS: &str = "victim-secret-3";
/// Length of the large hostile messages: far above the pooled-receive threshold (64 KiB).
const BIG: usize = 1 << 20;
/// STATUS_SUCCESS; any other status in an answer is an error answer.
const SUCCESS: u32 = 0;

/// What the server did after the hostile bytes.
#[derive(Debug, PartialEq)]
enum Reaction {
    /// It closed (or reset) the connection.
    Closed,
    /// It answered with this NT status.
    Answered(u32),
}

/// A 4-byte direct-TCP frame header for `len` bytes (the top byte, zero, is the type).
fn frame_header(len: usize) -> [u8; 4] {
    let b = (len as u32).to_be_bytes();
    [0, b[1], b[2], b[3]]
}

/// An SMB2 header for `command` with message id 0, no session.
fn smb2_header(command: u16) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(&[0xFE, b'S', b'M', b'B']);
    h[4..6].copy_from_slice(&64u16.to_le_bytes());
    h[12..14].copy_from_slice(&command.to_le_bytes());
    h[14..16].copy_from_slice(&1u16.to_le_bytes());
    h
}

/// A WRITE request of `data_len` bytes of data at file offset `offset` (the data follows
/// the fixed part at once, as clients send it).
fn write_request(data_len: usize, offset: u64) -> Vec<u8> {
    let mut m = smb2_header(9);
    m.extend_from_slice(&49u16.to_le_bytes());
    m.extend_from_slice(&0x70u16.to_le_bytes());
    m.extend_from_slice(&(data_len as u32).to_le_bytes());
    m.extend_from_slice(&offset.to_le_bytes());
    m.extend_from_slice(&[0xAB; 16]); // FileId
    m.extend_from_slice(&[0; 16]); // Channel, RemainingBytes, WriteChannelInfo, Flags
    m.extend(std::iter::repeat_n(0x5A, data_len));
    m
}

/// Connects to the SMB port with 10 s timeouts.
fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the SMB port");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .expect("write timeout");
    s
}

/// Sends `bytes` (a write the server refuses halfway is fine: it may close at once) and
/// then says what the server did.
fn reaction(mut s: TcpStream, bytes: &[u8], half_close: bool) -> Reaction {
    let sent = s.write_all(bytes);
    if half_close {
        let _ = s.shutdown(Shutdown::Write);
    }
    let mut h = [0u8; 4];
    match s.read_exact(&mut h) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
            panic!("server neither answered nor closed within 10 s (send: {sent:?})")
        }
        Err(_) => return Reaction::Closed,
    }
    let len = u32::from_be_bytes([0, h[1], h[2], h[3]]) as usize;
    assert!((64..1 << 20).contains(&len), "answer of {len} bytes");
    let mut msg = vec![0u8; len];
    s.read_exact(&mut msg).expect("the whole answer");
    assert_eq!(&msg[..4], &[0xFE, b'S', b'M', b'B'], "an SMB2 answer");
    Reaction::Answered(u32::from_le_bytes([msg[8], msg[9], msg[10], msg[11]]))
}

/// Connects `client` to the share (a session and a tree); returns the share's path.
async fn connect_share(client: &Client, port: u16) -> smb::Result<UncPath> {
    let share = UncPath::from_str(&format!(r"\\127.0.0.1:{port}\data"))?;
    client.share_connect(&share, USER, PASS.to_string()).await?;
    Ok(share)
}

/// Writes `data` to `name` on `share` through `client` and reads it back; `who` names the
/// client in a failure, which carries the server's log.
async fn expect_round_trip(
    q: &QuarryProcess,
    client: &Client,
    share: &UncPath,
    name: &str,
    data: &[u8],
    who: &str,
) {
    let back = write_then_read_back(client, &share.clone().with_path(name), data)
        .await
        .unwrap_or_else(|e| panic!("{who}: {e}\n{}", q.log_text()));
    assert!(back == data, "{who}: data read back differs");
}

#[test]
fn large_hostile_messages_get_an_error_or_a_closed_connection_and_clients_carry_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = QuarryProcess::start_in(&dir.path().join("data")).expect("quarry starts");
    let api = q.admin().expect("admin login");
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))
        .expect("create user");
    api.create("/api/v1/shares", &json!({"name": "data"}))
        .expect("create share");
    let port = q.smb.port();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Everything runs inside the runtime: the client crate's handles close themselves
    // with tasks when dropped. The raw sockets block, which a test may do on a
    // multi-threaded runtime.
    rt.block_on(async {
        // A client whose session is established before the attacks and used after them.
        let victim = Client::new(ClientConfig::default());
        let victim_share = connect_share(&victim, port)
            .await
            .unwrap_or_else(|e| panic!("victim's session: {e}\n{}", q.log_text()));
        let first = xorshift_bytes(5 * (1 << 20) + 4097, 11);
        let before = "victim before the attacks";
        expect_round_trip(&q, &victim, &victim_share, "before.bin", &first, before).await;

        // A frame length above the largest message (8 MiB + 64 KiB): closed at once.
        let mut oversized = frame_header(0xFF_FFFF).to_vec();
        oversized.extend_from_slice(&smb2_header(0));
        assert_eq!(reaction(connect(port), &oversized, false), Reaction::Closed);

        // Large WRITEs before any NEGOTIATE, at aligned and unaligned offsets: refused
        // (Quarry answers STATUS_INVALID_PARAMETER; a closed connection would do too).
        for offset in [0u64, 4097] {
            let msg = write_request(BIG, offset);
            let mut wire = frame_header(msg.len()).to_vec();
            wire.extend_from_slice(&msg);
            match reaction(connect(port), &wire, false) {
                Reaction::Closed => {}
                Reaction::Answered(st) => assert_ne!(st, SUCCESS, "WRITE without a session"),
            }
        }

        // A large message cut short: the server drops the connection, it does not wait on.
        let msg = write_request(BIG, 0);
        let mut cut = frame_header(msg.len()).to_vec();
        cut.extend_from_slice(&msg[..100 << 10]);
        assert_eq!(reaction(connect(port), &cut, true), Reaction::Closed);

        // A large sealed message for a session that does not exist: closed.
        let mut sealed = vec![0xFD, b'S', b'M', b'B'];
        sealed.extend(std::iter::repeat_n(0x11, BIG - 4));
        let mut wire = frame_header(sealed.len()).to_vec();
        wire.extend_from_slice(&sealed);
        assert_eq!(reaction(connect(port), &wire, false), Reaction::Closed);

        // Large garbage that is no SMB message at all: closed.
        let garbage = xorshift_bytes(BIG, 12);
        let mut wire = frame_header(garbage.len()).to_vec();
        wire.extend_from_slice(&garbage);
        assert_eq!(reaction(connect(port), &wire, false), Reaction::Closed);

        // The victim's session still works, and so does a new client.
        let second = xorshift_bytes(3 * (1 << 20) + 511, 13);
        let after = "victim after the attacks";
        expect_round_trip(&q, &victim, &victim_share, "after.bin", &second, after).await;
        let newcomer = Client::new(ClientConfig::default());
        let newcomer_share = connect_share(&newcomer, port)
            .await
            .unwrap_or_else(|e| panic!("new client's session: {e}\n{}", q.log_text()));
        let new = "new client after the attacks";
        expect_round_trip(&q, &newcomer, &newcomer_share, "new.bin", &first, new).await;
        assert!(q.pid().is_some(), "quarry still running");
        // A panic in a connection's task ends only that connection, which looks like a
        // clean close from outside: the log must not show one.
        let log = q.log_text();
        assert!(!log.contains("panicked"), "quarry panicked:\n{log}");
    });
}
