#!/usr/bin/env bash
# The Linux kernel's own initiators against Quarry, in Debian's 6.1 kernel under qemu TCG
# (the guest lab, tests/guest/): kernel cifs (SMB 3.1.1 sealed and 3.0) and nvme-tcp.
# These boot a guest (minutes each under TCG), so they are #[ignore]d in plain
# `cargo test` and run here, one at a time, never skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo test --no-fail-fast -p quarry-tests --test smb_kernel_cifs --test nvme_guest -- --ignored --test-threads=1
