//! Multichannel against the real `quarry` binary with the `smb` crate (smb-rs 0.12) as the
//! client: the appliance listens on 127.0.0.1 and 127.0.0.2 and reports both in
//! FSCTL_QUERY_NETWORK_INTERFACE_INFO; the crate, with multichannel on, binds a second
//! channel over 127.0.0.2 to its session. A 64 MiB file is written and read back with the
//! blocks spread over both channels, and the appliance's session listing must show that
//! each channel carried a real share of the bytes (counted on the server's sockets).
//! Then one channel's TCP connection is destroyed (`ss -K`) in the middle of a second copy:
//! the session and its open live on over the remaining channel, the blocks that failed on
//! the lost one are sent again over it, and the file reads back intact. The same holds
//! when the connection cut is the one that set the session up: the other channel adopts
//! the session. And 800 bindings in a row all succeed (the crate's race with Quarry's
//! fast answer, patched in tests/vendor/smb).

use std::net::IpAddr;
use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;

use quarry_tests::{xorshift_bytes, QuarryProcess};
use serde_json::{json, Value};
use smb::connection::MultiChannelConfig;
use smb::resource::file_util::{ReadAtChannel, WriteAtChannel};
use smb::{Client, ClientConfig, ConnectionConfig, FileAccessMask, FileCreateArgs, UncPath};

const USER: &str = "lanes";
const PASS: &str = "lanes-secret-9";
const BLOCK: usize = 1024 * 1024;
const FILE_LEN: usize = 64 * BLOCK;
/// How long one block's write may take before it counts as lost with its channel.
const BLOCK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);
/// Blocks in flight at once (spread round-robin over the channels).
const IN_FLIGHT: usize = 8;

/// The channels of the one SMB session, as the API lists them.
fn listed_channels(q: &QuarryProcess) -> Vec<Value> {
    let (s, b) = q.admin().unwrap().get("/api/v1/sessions").unwrap();
    assert_eq!(s, 200, "{b}");
    let smb: Vec<&Value> = b
        .as_array()
        .expect("session list")
        .iter()
        .filter(|s| s["protocol"] == "smb" && s["target"] == "lanes")
        .collect();
    // (The crate sets up another session for IPC$, where it asks for the interfaces.)
    assert_eq!(smb.len(), 1, "one SMB session on share lanes expected: {b}");
    smb[0]["channels"].as_array().cloned().unwrap_or_default()
}

/// Bytes the channel reached at `ip` received, from a listing.
fn received_at(channels: &[Value], ip: &str) -> u64 {
    channels
        .iter()
        .find(|c| c["server"].as_str().is_some_and(|s| s.starts_with(ip)))
        .and_then(|c| c["bytes_received"].as_u64())
        .unwrap_or(0)
}

/// Writes `data` in blocks, block `i` over `lanes[i % lanes.len()]`, [`IN_FLIGHT`] at a
/// time; a block whose channel fails is sent again over channel `fallback`. Returns how
/// many blocks had to be sent again.
async fn write_spread(
    file: Arc<smb::File>,
    data: Arc<Vec<u8>>,
    lanes: Vec<u32>,
    fallback: u32,
) -> usize {
    let blocks: Vec<usize> = (0..data.len().div_ceil(BLOCK)).collect();
    let mut resent = 0;
    for window in blocks.chunks(IN_FLIGHT) {
        let mut set = tokio::task::JoinSet::new();
        for &b in window {
            let (file, data) = (file.clone(), data.clone());
            let lane = lanes[b % lanes.len()];
            set.spawn(async move {
                let at = b * BLOCK;
                let end = (at + BLOCK).min(data.len());
                // The crate does not fail requests left on a connection that died: give
                // each block a deadline and send it again over the fallback after it.
                let r = tokio::time::timeout(
                    BLOCK_DEADLINE,
                    file.write_at_channel(&data[at..end], at as u64, Some(lane)),
                )
                .await;
                (b, matches!(r, Ok(Ok(n)) if n == end - at))
            });
        }
        for (b, ok) in set.join_all().await {
            if !ok {
                resent += 1;
                let at = b * BLOCK;
                let end = (at + BLOCK).min(data.len());
                let n = file
                    .write_at_channel(&data[at..end], at as u64, Some(fallback))
                    .await
                    .unwrap_or_else(|e| panic!("block {b} failed on the fallback too: {e}"));
                assert_eq!(n, end - at, "short write of block {b}");
            }
        }
    }
    resent
}

/// Reads the file back, blocks spread over `lanes` like [`write_spread`].
async fn read_spread(file: &smb::File, len: usize, lanes: &[u32]) -> Vec<u8> {
    let mut back = vec![0u8; len];
    for (b, chunk) in back.chunks_mut(BLOCK).enumerate() {
        let mut at = 0;
        while at < chunk.len() {
            let n = file
                .read_at_channel(
                    &mut chunk[at..],
                    (b * BLOCK + at) as u64,
                    Some(lanes[b % lanes.len()]),
                )
                .await
                .unwrap_or_else(|e| panic!("read of block {b}: {e}"));
            assert!(n > 0, "unexpected end of file in block {b}");
            at += n;
        }
    }
    back
}

/// Creates (or truncates) the file at `path`.
async fn create_overwrite(client: &Client, path: &UncPath) -> Arc<smb::File> {
    Arc::new(
        client
            .create_file(
                path,
                &FileCreateArgs::make_overwrite(Default::default(), Default::default()),
            )
            .await
            .expect("create")
            .unwrap_file(),
    )
}

async fn open_existing(client: &Client, path: &UncPath) -> smb::File {
    client
        .create_file(
            path,
            &FileCreateArgs::make_open_existing(FileAccessMask::new().with_generic_read(true)),
        )
        .await
        .expect("open existing")
        .unwrap_file()
}

/// Quarry listening on 127.0.0.1 and 127.0.0.2 (one port), with the user and share
/// `lanes`.
fn start_on_two_addresses(dir: &tempfile::TempDir) -> QuarryProcess {
    let second: IpAddr = [127, 0, 0, 2].into();
    let q = QuarryProcess::start_with_smb_also(&dir.path().join("data"), &[], &[second])
        .expect("quarry starts");
    let api = q.admin().unwrap();
    api.create("/api/v1/users", &json!({"name": USER, "password": PASS}))
        .unwrap();
    api.create("/api/v1/shares", &json!({"name": "lanes"}))
        .unwrap();
    q
}

/// The runtime the crate's client runs on.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

/// The crate's client with multichannel on, connected to share `lanes`: the client, the
/// share's path, and its channel ids in order (the first is the connection that set the
/// session up).
async fn connect_with_multichannel(q: &QuarryProcess) -> (Client, UncPath, Vec<u32>) {
    let port = q.smb.port();
    let client = Client::new(ClientConfig {
        connection: ConnectionConfig {
            multichannel: MultiChannelConfig::Always,
            port: Some(port),
            ..Default::default()
        },
        ..Default::default()
    });
    let share = UncPath::from_str(&format!(r"\\127.0.0.1:{port}\lanes")).unwrap();
    client
        .share_connect(&share, USER, PASS.to_string())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", q.log_text()));
    let mut lanes: Vec<u32> = client
        .get_channels(&share)
        .await
        .expect("channels")
        .into_keys()
        .collect();
    lanes.sort_unstable();
    (client, share, lanes)
}

#[test]
fn copies_spread_over_two_channels_and_survive_losing_one() {
    let dir = tempfile::tempdir().unwrap();
    let q = start_on_two_addresses(&dir);
    let port = q.smb.port();

    runtime().block_on(async {
        let (client, share, lanes) = connect_with_multichannel(&q).await;
        assert_eq!(
            lanes.len(),
            2,
            "the crate bound one channel per reported interface\n{}",
            q.log_text()
        );
        let listed = listed_channels(&q);
        assert_eq!(
            listed.len(),
            2,
            "the session runs over two connections: {listed:?}"
        );

        // A copy spread over both channels.
        let path = share.clone().with_path("spread.bin");
        let data = Arc::new(xorshift_bytes(FILE_LEN, 7));
        let file = create_overwrite(&client, &path).await;
        let resent = write_spread(file.clone(), data.clone(), lanes.clone(), lanes[0]).await;
        assert_eq!(resent, 0, "no channel was cut, nothing is sent again");
        // (The crate's reads stop at the size the open reported: read from a new open.)
        let reader = open_existing(&client, &path).await;
        let back = read_spread(&reader, FILE_LEN, &lanes).await;
        assert!(back == *data, "data read back over two channels differs");
        reader.close().await.expect("close");
        let listed = listed_channels(&q);
        let (first, other) = (
            received_at(&listed, "127.0.0.1"),
            received_at(&listed, "127.0.0.2"),
        );
        println!("bytes received per channel: 127.0.0.1 {first}, 127.0.0.2 {other}");
        for (ip, got) in [("127.0.0.1", first), ("127.0.0.2", other)] {
            assert!(
                got >= (FILE_LEN / 2 - 4 * BLOCK) as u64,
                "channel {ip} carried {got} bytes of a {FILE_LEN}-byte copy: {listed:?}"
            );
        }

        // A second copy, with the 127.0.0.2 channel cut in the middle.
        let data2 = Arc::new(xorshift_bytes(FILE_LEN, 11));
        let writer = tokio::spawn(write_spread(
            file.clone(),
            data2.clone(),
            lanes.clone(),
            lanes[0],
        ));
        let half = (FILE_LEN / 2) as u64;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while received_at(&listed_channels(&q), "127.0.0.2") < other + half / 2 {
            assert!(std::time::Instant::now() < deadline, "second copy stalled");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        eprintln!("cutting the 127.0.0.2 channel");
        let cut = Command::new("ss")
            .args(["-K", "dst", "127.0.0.2", "dport", "=", &port.to_string()])
            .output()
            .expect("ss runs");
        assert!(cut.status.success(), "ss -K: {cut:?}");
        eprintln!("cut; waiting for the writer");
        let resent = writer.await.expect("writer task");
        println!("blocks sent again after the cut: {resent}");
        let listed = listed_channels(&q);
        assert_eq!(
            listed.len(),
            1,
            "the cut channel is gone, the session stays: {listed:?}"
        );
        // The open and its session survived on the first channel.
        eprintln!("closing");
        file.close().await.expect("close");
        eprintln!("reopening");
        let reopened = open_existing(&client, &path).await;
        let back = read_spread(&reopened, FILE_LEN, &lanes[..1]).await;
        assert!(back == *data2, "reopened file differs");
        reopened.close().await.expect("close");
    });
}

/// Losing the connection that set the session up (its owner) in the middle of a copy: the
/// channel over 127.0.0.2 adopts the session, the blocks lost with the owner are sent again
/// over it, and the open, on the remaining channel, reads the whole file back.
#[test]
fn the_session_outlives_the_connection_that_set_it_up() {
    let dir = tempfile::tempdir().unwrap();
    let q = start_on_two_addresses(&dir);
    let port = q.smb.port();
    runtime().block_on(async {
        let (client, share, lanes) = connect_with_multichannel(&q).await;
        assert_eq!(lanes.len(), 2, "two channels\n{}", q.log_text());
        let (owner_lane, other_lane) = (lanes[0], lanes[1]);
        let path = share.clone().with_path("adopted.bin");
        // The file is made full size first: the crate reads no further than the size its
        // open reported.
        let data = Arc::new(xorshift_bytes(FILE_LEN, 21));
        let file = create_overwrite(&client, &path).await;
        let zeros = Arc::new(vec![0u8; FILE_LEN]);
        write_spread(file.clone(), zeros, vec![owner_lane], owner_lane).await;
        file.close().await.expect("close");
        let file = Arc::new(
            client
                .create_file(
                    &path,
                    &FileCreateArgs::make_open_existing(
                        FileAccessMask::new()
                            .with_generic_read(true)
                            .with_generic_write(true),
                    ),
                )
                .await
                .expect("open existing")
                .unwrap_file(),
        );
        let before = received_at(&listed_channels(&q), "127.0.0.1");
        let writer = tokio::spawn(write_spread(
            file.clone(),
            data.clone(),
            lanes.clone(),
            other_lane,
        ));
        let half = (FILE_LEN / 2) as u64;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while received_at(&listed_channels(&q), "127.0.0.1") < before + half / 2 {
            assert!(std::time::Instant::now() < deadline, "copy stalled");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        eprintln!("cutting the owner's connection over 127.0.0.1");
        let cut = Command::new("ss")
            .args(["-K", "dst", "127.0.0.1", "dport", "=", &port.to_string()])
            .output()
            .expect("ss runs");
        assert!(cut.status.success(), "ss -K: {cut:?}");
        let resent = writer.await.expect("writer task");
        println!("blocks sent again after the owner was cut: {resent}");
        let listed = listed_channels(&q);
        assert_eq!(
            listed.len(),
            1,
            "the session lives on one channel: {listed:?}"
        );
        assert!(
            listed[0]["server"]
                .as_str()
                .is_some_and(|s| s.starts_with("127.0.0.2")),
            "the remaining channel is the one over 127.0.0.2: {listed:?}"
        );
        let back = read_spread(&file, FILE_LEN, &[other_lane]).await;
        assert!(
            back == *data,
            "the file read back over the adopting channel differs"
        );
    });
}

/// How many sessions [`every_binding_gets_its_channel`] binds a second channel to.
const BINDINGS: usize = 800;
/// How many of those bindings run at once.
const AT_ONCE: usize = 16;

/// A binding's final SESSION_SETUP answer is signed with the new channel's key, which the
/// crate installs only after it has sent the request the key derives from. Quarry answers
/// fast enough to beat that; the crate then checked the answer with the primary channel's
/// key, failed, and went on with one channel (tests/vendor/smb/QUARRY-PATCH.md, change
/// 3). Without the patch this failed in each of four runs (16 clients at a time, the
/// race lost within the first 700 bindings each time); it takes about 5 s.
#[test]
fn every_binding_gets_its_channel() {
    let dir = tempfile::tempdir().unwrap();
    let q = start_on_two_addresses(&dir);
    runtime().block_on(async {
        for round in 0..BINDINGS / AT_ONCE {
            let clients = (0..AT_ONCE).map(|_| connect_with_multichannel(&q));
            for (client, _share, lanes) in futures_util::future::join_all(clients).await {
                assert_eq!(
                    lanes.len(),
                    2,
                    "round {round}: a binding failed\n{}",
                    q.log_text()
                );
                client.close().await.expect("close");
            }
        }
    });
}
