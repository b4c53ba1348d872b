#!/bin/sh
# Smoke check: the guest booted, the network reaches the host, modules load.
. /checks/common.sh
SET=smoke
run_step smoke.modprobe modprobe -a nvme-tcp cifs ext4
run_step smoke.ping ping -c 1 -W 5 "${SMOKE_HOST:-10.0.2.2}"
finish_set
