#!/bin/bash
# Captures smbclient -> smbd sessions for several dialect/cipher combinations.
set -u
cd ${SMBD_DIR:-/tmp/smbauth/samba}
run() { # name, smbclient args...
  local name=$1; shift
  tcpdump -i lo -w cap_$name.pcap -s 0 'tcp port 14451' >/dev/null 2>&1 & local tp=$!
  sleep 1
  smbclient //127.0.0.1/data -p 14451 -U 'alice%Secret#123' "$@" -c 'ls' > out_$name.txt 2>&1
  sleep 1; kill $tp; wait $tp 2>/dev/null
  echo "$name: $(tail -1 out_$name.txt)"
}
run smb2_10 -m SMB2_10 --client-protection=sign
run smb3_00 -m SMB3_00 --client-protection=sign
run smb3_00_enc -m SMB3_00 --client-protection=encrypt
for c in aes-128-ccm aes-128-gcm aes-256-ccm aes-256-gcm; do
  run smb3_11_$c -m SMB3_11 --client-protection=encrypt --option="client smb3 encryption algorithms=$c"
done
run smb3_11_cmac -m SMB3_11 --client-protection=sign --option="client smb3 signing algorithms=aes-128-cmac"
