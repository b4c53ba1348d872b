#!/usr/bin/env bash
# The guest lab's CI entry: install what is missing, build (or reuse) the
# image, prove the harness fails when it should (selftest), then the reference
# run against Samba and the in-guest kernel nvmet. GUEST_WITH_RDMA=1 adds the
# Soft-RoCE NVMe/RDMA sets. Exit non-zero on any failure.
set -euo pipefail
dir="$(dirname "${BASH_SOURCE[0]}")"
"$dir/prereqs.sh" --reference
"$dir/selftest.sh"
if [ "${GUEST_WITH_RDMA:-0}" = 1 ]; then
    "$dir/reference.sh" --with-rdma --quiet
else
    "$dir/reference.sh" --quiet
fi
