// The body of the fuzz target `queue_bytes` (`../fuzz_targets/queue_bytes.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use std::sync::Arc;

use quarry_nvmeof::target::mem::MemDevice;
use quarry_nvmeof::target::*;
use quarry_nvmeof::tcp;

fuzz_target!(|data: &[u8]| {
    let dev = Arc::new(MemDevice::new(1 << 20));
    let cfg = TargetConfig {
        subsystems: vec![SubsystemConfig {
            nqn: "nqn.2024-01.io.lab:tcp-loop".into(),
            serial: "FUZZ".into(),
            allow_any_host: true,
            hosts: vec![],
            namespaces: vec![NamespaceConfig {
                nsid: 1,
                uuid: [1; 16],
                lba_shift: 12,
                size_bytes: 1 << 20,
                device: dev,
                counters: Arc::new(IoCounters::default()),
                label: "fuzz".into(),
            }],
        }],
        ports: vec![],
    };
    let target = Target::new(cfg, TargetIdentity::default(), None);
    let listener = ListenerInfo {
        traddr: "127.0.0.1".into(),
        trsvcid: "4420".into(),
        ipv6: false,
        trtype: quarry_nvmeof::spec::log::TRTYPE_TCP,
    };
    let mut q = Queue::new(target, listener, "fuzz".into());
    let mut rest = data;
    let mut now = 0u64;
    while !rest.is_empty() && !q.is_closed() {
        now += 10;
        let ctx = q.decode_context();
        match tcp::frame_len(rest, &ctx) {
            Ok(Some(n)) if n <= rest.len() => {
                let frame = &rest[..n];
                match tcp::decode(frame, &ctx) {
                    Ok(p) => q.handle_pdu(p, &frame[..n.min(72)], now),
                    Err(e) => q.decode_error(&e, &frame[..n.min(72)]),
                }
                rest = &rest[n..];
            }
            Ok(_) => break,
            Err(e) => {
                q.decode_error(&e, &rest[..rest.len().min(8)]);
                break;
            }
        }
        while let Some(o) = q.poll_output() {
            if let Output::Io(req) = o {
                let r = req.execute();
                q.io_done(&req, r);
            }
        }
        q.tick(now);
    }
    q.on_disconnect();
});
