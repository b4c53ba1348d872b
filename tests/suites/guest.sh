#!/usr/bin/env bash
# The Linux kernel's own initiators against Quarry, in Debian's 6.1 kernel under qemu TCG
# (the guest lab, tests/guest/): kernel cifs (SMB 3.1.1 sealed and 3.0) and nvme-tcp
# against Quarry on the host, and nvme-rdma (Soft-RoCE) against Quarry built with the
# `rdma` feature running inside the guest.
# These boot a guest (minutes each under TCG), so they are #[ignore]d in plain
# `cargo test` and run here, one at a time, never skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The in-guest binary: the same release build (and target dir) as the image suite's, so
# one of the two compiles it and the other reuses it.
cargo build --release -p quarry --bin quarry --features rdma
export QUARRY_GUEST_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/quarry"
# shellcheck disable=SC2086
# --workspace, not -p quarry-tests: the same feature resolution as dev/test's cargo-tests,
# so these test binaries are the ones already built, not a second copy of everything.
exec cargo test --workspace ${QUARRY_CARGO_FEATURES:-} --no-fail-fast --test smb_kernel_cifs --test nvme_guest --test nvme_rdma_guest -- --ignored --test-threads=1
