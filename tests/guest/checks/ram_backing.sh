#!/bin/sh
# Check set "ram_backing": an ext4 file system on a RAM block device (brd) for the
# benchmark's namespaces, as a stand-in for an NVMe drive: it takes O_DIRECT, as the
# appliance's pool does, so both targets run the data path they use in production
# (Quarry's O_DIRECT volume descriptor through its io_uring engine; nvmet's file
# namespace with buffered_io=0, which is O_DIRECT too), where the guest's tmpfs (no
# O_DIRECT in 6.1) sends both through buffered I/O and worker threads. Run before
# quarry_target, which then keeps its data directory on it (QUARRY_DATA beneath the
# mount point), and nvme_perf (BENCH_NVMET_BACKING beneath it, BENCH_NVMET_BUFFERED=0).
#
# Parameters:
#   RAM_BACKING_MIB     size of the RAM disk (required: room for both namespaces)
#   RAM_BACKING_MOUNT   where the file system is mounted (default /mnt/bench)
#
# Check names: ram_backing.{modules,mkfs,mount,direct}.
. /checks/common.sh

need ram_backing RAM_BACKING_MIB
RAM_BACKING_MOUNT="${RAM_BACKING_MOUNT:-/mnt/bench}"

# One RAM disk of RAM_BACKING_MIB (brd's rd_size is in KiB), no partitions.
modules() {
    modprobe -a ext4 || return 1
    modprobe brd rd_nr=1 rd_size=$((RAM_BACKING_MIB * 1024)) max_part=0 || return 1
    [ -b /dev/ram0 ] || { echo "no /dev/ram0 after modprobe brd"; return 1; }
}
make_fs() {
    # No lazy init: its background zeroing thread would run during the measurements.
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 /dev/ram0
}
mount_it() {
    mkdir -p "$RAM_BACKING_MOUNT" && mount -t ext4 /dev/ram0 "$RAM_BACKING_MOUNT" || return 1
    grep " $RAM_BACKING_MOUNT ext4 " /proc/mounts
}
# O_DIRECT must work there, or the comparison is not the one this set exists for.
direct() {
    dd if=/dev/zero of="$RAM_BACKING_MOUNT/.direct-probe" bs=4096 count=1 oflag=direct 2>&1 &&
        rm -f "$RAM_BACKING_MOUNT/.direct-probe"
}

run_step ram_backing.modules modules || { finish_set; exit 1; }
run_step ram_backing.mkfs make_fs || { finish_set; exit 1; }
run_step ram_backing.mount mount_it || { finish_set; exit 1; }
run_step ram_backing.direct direct
finish_set
