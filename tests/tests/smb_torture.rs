//! Samba's smbtorture (Debian samba-testsuite 4.17) against the real `quarry` binary: every
//! test in [`PASSING`] must pass. The list is the subset of `../shared/smb/torture-samba-pass.txt`
//! (the tests that pass against Samba here) that Quarry passes today; a test leaves the list
//! only by a deliberate change. Tests of those suites missing here need durable handles,
//! streams, security descriptors or details of leases and notify not built yet (issue 9).

use std::process::Command;
use std::time::Duration;

use quarry_tests::QuarryProcess;
use serde_json::json;

const USER: &str = "torture";
const PASS: &str = "torture-pass-1";
/// Wall-clock limit per smbtorture test (a hang is a failure, not a stuck suite).
const PER_TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// smbtorture tests Quarry passes (generated from a full run, then kept by hand).
const PASSING: &[&str] = &[
    "smb2.charset.Testing composite character (a umlaut)",
    "smb2.charset.Testing naked diacritical (umlaut)",
    "smb2.charset.Testing wide-a",
    "smb2.compound.compound-break",
    "smb2.compound.create-write-close",
    "smb2.compound.interim1",
    "smb2.compound.invalid1",
    "smb2.compound.invalid2",
    "smb2.compound.invalid3",
    "smb2.compound.invalid4",
    "smb2.compound.related1",
    "smb2.compound.related2",
    "smb2.compound.related3",
    "smb2.compound.related5",
    "smb2.compound.related6",
    "smb2.compound.related8",
    "smb2.compound.related9",
    "smb2.compound.unrelated1",
    "smb2.compound_async.flush_close",
    "smb2.compound_async.flush_flush",
    "smb2.compound_find.compound_find_close",
    "smb2.compound_find.compound_find_related",
    "smb2.compound_find.compound_find_unrelated",
    "smb2.connect",
    "smb2.create.bench-path-contention-shared",
    "smb2.create.brlocked",
    "smb2.create.delete",
    "smb2.create.dir-alloc-size",
    "smb2.create.dosattr_tmp_dir",
    "smb2.create.impersonation",
    "smb2.create.leading-slash",
    "smb2.create.mkdir-dup",
    "smb2.create.multi",
    "smb2.credits.session_setup_credits_granted",
    "smb2.credits.single_req_credits_granted",
    "smb2.credits.skipped_mid",
    "smb2.delete-on-close-perms.BUG14427",
    "smb2.delete-on-close-perms.READONLY",
    "smb2.deny.deny1",
    "smb2.deny.deny2",
    "smb2.dir.find",
    "smb2.dir.fixed",
    "smb2.dir.large-files",
    "smb2.dir.many",
    "smb2.dir.sorted",
    "smb2.fileid.unique",
    "smb2.fileid.unique-dir",
    "smb2.getinfo.granted",
    "smb2.getinfo.qfile_buffercheck",
    "smb2.ioctl.compress_notsup_get",
    "smb2.ioctl.compress_notsup_set",
    "smb2.ioctl.copy_chunk_across_shares",
    "smb2.ioctl.copy_chunk_across_shares2",
    "smb2.ioctl.copy_chunk_across_shares3",
    "smb2.ioctl.copy_chunk_append",
    "smb2.ioctl.copy_chunk_bad_access",
    "smb2.ioctl.copy_chunk_bad_key",
    "smb2.ioctl.copy_chunk_dest_lock",
    "smb2.ioctl.copy_chunk_limits",
    "smb2.ioctl.copy_chunk_max_output_sz",
    "smb2.ioctl.copy_chunk_multi",
    "smb2.ioctl.copy_chunk_overwrite",
    "smb2.ioctl.copy_chunk_simple",
    "smb2.ioctl.copy_chunk_sparse_dest",
    "smb2.ioctl.copy_chunk_src_exceed",
    "smb2.ioctl.copy_chunk_src_exceed_multi",
    "smb2.ioctl.copy_chunk_src_is_dest",
    "smb2.ioctl.copy_chunk_src_is_dest_overlap",
    "smb2.ioctl.copy_chunk_src_lock",
    "smb2.ioctl.copy_chunk_tiny",
    "smb2.ioctl.copy_chunk_write_access",
    "smb2.ioctl.copy_chunk_zero_length",
    "smb2.ioctl.network_interface_info",
    "smb2.ioctl.req_resume_key",
    "smb2.ioctl.req_two_resume_keys",
    "smb2.ioctl.sparse_copy_chunk",
    "smb2.ioctl.sparse_dir_flag",
    "smb2.ioctl.sparse_file_attr",
    "smb2.ioctl.sparse_file_flag",
    "smb2.ioctl.sparse_lock",
    "smb2.ioctl.sparse_perms",
    "smb2.ioctl.sparse_punch_invalid",
    "smb2.ioctl.sparse_qar",
    "smb2.ioctl.sparse_qar_malformed",
    "smb2.ioctl.sparse_qar_multi",
    "smb2.ioctl.sparse_qar_ob1",
    "smb2.ioctl.sparse_qar_overflow",
    "smb2.ioctl.sparse_set_nobuf",
    "smb2.ioctl.sparse_set_oversize",
    "smb2.lease.break",
    "smb2.lease.break_twice",
    "smb2.lease.breaking5",
    "smb2.lease.complex1",
    "smb2.lease.duplicate_create",
    "smb2.lease.duplicate_open",
    "smb2.lease.lock1",
    "smb2.lease.multibreak",
    "smb2.lease.oplock",
    "smb2.lease.statopen",
    "smb2.lease.statopen2",
    "smb2.lease.statopen4",
    "smb2.lease.timeout-disconnect",
    "smb2.lease.upgrade",
    "smb2.lease.upgrade2",
    "smb2.lease.v1_bug15148",
    "smb2.lease.v2_bug15148",
    "smb2.lease.v2_complex2",
    "smb2.lease.v2_epoch1",
    "smb2.lock.async",
    "smb2.lock.auto-unlock",
    "smb2.lock.cancel",
    "smb2.lock.cancel-logoff",
    "smb2.lock.cancel-tdis",
    "smb2.lock.contend",
    "smb2.lock.context",
    "smb2.lock.errorcode",
    "smb2.lock.lock",
    "smb2.lock.multiple-unlock",
    "smb2.lock.overlap",
    "smb2.lock.range",
    "smb2.lock.rw-exclusive",
    "smb2.lock.rw-shared",
    "smb2.lock.stacking",
    "smb2.lock.truncate",
    "smb2.lock.unlock",
    "smb2.lock.valid-request",
    "smb2.lock.zerobytelength",
    "smb2.lock.zerobyteread",
    "smb2.mkdir",
    "smb2.multichannel.generic.interface_info",
    "smb2.multichannel.generic.num_channels",
    "smb2.notify.basedir",
    "smb2.notify.close",
    "smb2.notify.double",
    "smb2.notify.file",
    "smb2.notify.invalid-reauth",
    "smb2.notify.logoff",
    "smb2.notify.overflow",
    "smb2.notify.rmdir1",
    "smb2.notify.rmdir2",
    "smb2.notify.rmdir3",
    "smb2.notify.rmdir4",
    "smb2.notify.session-reconnect",
    "smb2.notify.tcon",
    "smb2.notify.tcp",
    "smb2.notify.tdis",
    "smb2.notify.tdis1",
    "smb2.oplock.batch1",
    "smb2.oplock.batch10",
    "smb2.oplock.batch11",
    "smb2.oplock.batch12",
    "smb2.oplock.batch15",
    "smb2.oplock.batch19",
    "smb2.oplock.batch2",
    "smb2.oplock.batch21",
    "smb2.oplock.batch22a",
    "smb2.oplock.batch23",
    "smb2.oplock.batch24",
    "smb2.oplock.batch25",
    "smb2.oplock.batch3",
    "smb2.oplock.batch4",
    "smb2.oplock.batch5",
    "smb2.oplock.batch6",
    "smb2.oplock.batch7",
    "smb2.oplock.batch8",
    "smb2.oplock.brl1",
    "smb2.oplock.brl2",
    "smb2.oplock.brl3",
    "smb2.oplock.exclusive1",
    "smb2.oplock.exclusive2",
    "smb2.oplock.exclusive3",
    "smb2.oplock.exclusive4",
    "smb2.oplock.exclusive6",
    "smb2.oplock.exclusive9",
    "smb2.oplock.levelii500",
    "smb2.oplock.levelii501",
    "smb2.oplock.levelii502",
    "smb2.oplock.statopen1",
    "smb2.read.access",
    "smb2.read.dir",
    "smb2.read.eof",
    "smb2.read.position",
    "smb2.rename.close-full-information",
    "smb2.rename.msword",
    "smb2.rename.no_share_delete_but_delete_access",
    "smb2.rename.no_sharing",
    "smb2.rename.rename_dir_bench",
    "smb2.rename.rename_dir_openfile",
    "smb2.rename.share_delete_and_delete_access",
    "smb2.rename.share_delete_no_delete_access",
    "smb2.rename.simple",
    "smb2.replay.replay-commands",
    "smb2.replay.replay-regular",
    "smb2.replay.replay7",
    "smb2.rw.rw1",
    "smb2.rw.rw2",
    "smb2.session.bind1",
    "smb2.session.bind2",
    "smb2.session.bind_invalid_auth",
    "smb2.session.bind_negative_smb210d",
    "smb2.session.bind_negative_smb210s",
    "smb2.session.bind_negative_smb2to3d",
    "smb2.session.bind_negative_smb2to3s",
    "smb2.session.bind_negative_smb3encGtoCd",
    "smb2.session.bind_negative_smb3encGtoCs",
    "smb2.session.bind_negative_smb3signC30toGd",
    "smb2.session.bind_negative_smb3signC30toGs",
    "smb2.session.bind_negative_smb3signCtoGd",
    "smb2.session.bind_negative_smb3signCtoGs",
    "smb2.session.bind_negative_smb3signCtoHs",
    "smb2.session.bind_negative_smb3signGtoC30d",
    "smb2.session.bind_negative_smb3signGtoC30s",
    "smb2.session.bind_negative_smb3signGtoCd",
    "smb2.session.bind_negative_smb3signGtoCs",
    "smb2.session.bind_negative_smb3signGtoH2Xd",
    "smb2.session.bind_negative_smb3signGtoH2Xs",
    "smb2.session.bind_negative_smb3signGtoHd",
    "smb2.session.bind_negative_smb3signGtoHs",
    "smb2.session.bind_negative_smb3signH2XtoGd",
    "smb2.session.bind_negative_smb3signH2XtoGs",
    "smb2.session.bind_negative_smb3signHtoCs",
    "smb2.session.bind_negative_smb3signHtoGd",
    "smb2.session.bind_negative_smb3signHtoGs",
    "smb2.session.bind_negative_smb3sneCtoGd",
    "smb2.session.bind_negative_smb3sneCtoGs",
    "smb2.session.bind_negative_smb3sneGtoCd",
    "smb2.session.bind_negative_smb3sneGtoCs",
    "smb2.session.bind_negative_smb3sneGtoHd",
    "smb2.session.bind_negative_smb3sneGtoHs",
    "smb2.session.bind_negative_smb3sneHtoGd",
    "smb2.session.bind_negative_smb3sneHtoGs",
    "smb2.session.bind_negative_smb3to2d",
    "smb2.session.bind_negative_smb3to2s",
    "smb2.session.bind_negative_smb3to3d",
    "smb2.session.bind_negative_smb3to3s",
    "smb2.session.encryption-aes-128-ccm",
    "smb2.session.encryption-aes-128-gcm",
    "smb2.session.encryption-aes-256-ccm",
    "smb2.session.encryption-aes-256-gcm",
    "smb2.session.ntlmssp_bug14932",
    "smb2.session.reauth1",
    "smb2.session.reauth6",
    "smb2.session.reconnect1",
    "smb2.session.reconnect2",
    "smb2.session.signing-aes-128-cmac",
    "smb2.session.signing-aes-128-gmac",
    "smb2.session.signing-hmac-sha-256",
    "smb2.session.two_logoff",
    "smb2.sharemode.access-sharemode",
    "smb2.sharemode.bug14375",
    "smb2.sharemode.sharemode-access",
    "smb2.tcon",
    "smb2.timestamps.delayed-1write",
    "smb2.timestamps.delayed-write-vs-flush",
    "smb2.timestamps.delayed-write-vs-setbasic",
    "smb2.timestamps.delayed-write-vs-seteof",
    "smb2.timestamps.freeze-thaw",
    "smb2.timestamps.test_close_not_attrib",
    "smb2.timestamps.time_t_-1",
    "smb2.timestamps.time_t_-2",
    "smb2.timestamps.time_t_0",
    "smb2.timestamps.time_t_1",
    "smb2.timestamps.time_t_10000000000",
    "smb2.timestamps.time_t_15032385535",
    "smb2.timestamps.time_t_1968",
    "smb2.timestamps.time_t_4294967295",
];

#[test]
fn smbtorture_suites_pass() {
    if Command::new("smbtorture")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("smbtorture is not installed (Debian package samba-testsuite)");
    }
    let q = QuarryProcess::start().expect("quarry starts");
    let api = q.admin().expect("admin login");
    let (s, b) = api
        .post("/api/v1/users", &json!({"name": USER, "password": PASS}))
        .unwrap();
    assert_eq!(s, 201, "{b}");
    let (s, b) = api
        .post("/api/v1/shares", &json!({"name": "torture"}))
        .unwrap();
    assert_eq!(s, 201, "{b}");
    let cwd = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    for t in PASSING {
        let out = Command::new("timeout")
            .arg(PER_TEST_TIMEOUT.as_secs().to_string())
            .arg("smbtorture")
            .arg("//127.0.0.1/torture")
            .args([
                "-p",
                &q.smb.port().to_string(),
                "-U",
                &format!("{USER}%{PASS}"),
            ])
            .arg(t)
            .current_dir(cwd.path())
            .output()
            .expect("smbtorture runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let name = t.rsplit('.').next().unwrap_or(t);
        let ok = text.lines().any(|l| l.trim() == format!("success: {name}"))
            && !text
                .lines()
                .any(|l| l.starts_with("failure:") || l.starts_with("error:"));
        if !ok {
            let tail: Vec<&str> = text.lines().rev().take(6).collect();
            failed.push(format!(
                "{t}: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} smbtorture tests failed:\n{}",
        failed.len(),
        PASSING.len(),
        failed.join("\n")
    );
}
