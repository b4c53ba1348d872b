#!/bin/sh
# Check set "cifs": the Linux kernel's cifs client against an SMB server.
#
# Parameters (environment, from run.sh --param):
#   SMB_ADDR       server address as seen from the guest (host: 10.0.2.2)   required
#   SMB_SHARE      share name                                             required
#   SMB_USER       user name                                              required
#   SMB_PASS       password                                               required
#   SMB_PORT       TCP port (default 445)
#   SMB_MOUNTS     space-separated mount option sets, one mount each
#                  (default "vers=3.1.1,seal vers=3.0")
#   SMB_EXTRA_OPTS extra options added to every mount (e.g. "cache=none")
#   SMB_FILE_MIB   size of the file copied in and out (default 64)
#   SMB_NFILES     files created, renamed and deleted (default 1000)
#   SMB_EXPECT_SIZE_KIB  if set, `df` must report this size (the share quota)
#   SMB_WORKDIR    scratch directory created in the share (default: random)
#   SMB_METRICS_URL  Quarry's /metrics (e.g. http://10.0.2.2:8080/metrics): adds the
#                  check that re-reading the big file is served from the client's
#                  cache (its lease), with no READ reaching the server, and the
#                  directory lease checks: listing the share root again sends no
#                  QUERY_DIRECTORY, and a file another connection creates there
#                  still shows up (the server broke the lease)
#
# Check names: cifs.modules, cifs.<tag>.{mount,mount_opts,copy_in,remount,
# copy_out,reread_cached,root_listing_cached,root_listing_fresh,ls_l,create,rename,
# delete,df,cleanup,umount} where <tag> is the
# option set with "vers=" dropped and "," turned into "+" (e.g. 3.1.1+seal).
. /checks/common.sh

need cifs SMB_ADDR SMB_SHARE SMB_USER SMB_PASS
SMB_PORT="${SMB_PORT:-445}"
SMB_MOUNTS="${SMB_MOUNTS:-vers=3.1.1,seal vers=3.0}"
SMB_FILE_MIB="${SMB_FILE_MIB:-64}"
SMB_NFILES="${SMB_NFILES:-1000}"
SMB_WORKDIR="${SMB_WORKDIR:-guestlab-$(cut -c1-8 /proc/sys/kernel/random/uuid)}"
MNT=/mnt/smb
MNT2=/mnt/smb-peer
SRC=/tmp/cifs-src.bin
BACK=/tmp/cifs-back.bin

# Modules cifs asks for at mount time (signing, preauth hash, sealing).
run_step cifs.modules modprobe -a cifs cmac gcm ccm sha512_generic ecb ctr ghash_generic aesni_intel nls_utf8 || exit 1

head -c "$((SMB_FILE_MIB * 1048576))" /dev/urandom >"$SRC"
SRC_SHA="$(sha256_of "$SRC")"
SRC_BYTES="$(stat -c %s "$SRC")"
mkdir -p "$MNT"

smb_mount() { # OPTS
    mount -t cifs "//$SMB_ADDR/$SMB_SHARE" "$MNT" \
        -o "ip=$SMB_ADDR,port=$SMB_PORT,username=$SMB_USER,password=$SMB_PASS,$1${SMB_EXTRA_OPTS:+,$SMB_EXTRA_OPTS}"
}
is_mounted() { grep -q " $MNT cifs " /proc/mounts; }

# Every option of the set appears in /proc/mounts (proves e.g. seal and the
# dialect really took).
mount_opts_match() { # OPTS
    _m="$(grep " $MNT cifs " /proc/mounts)"
    for _o in $(echo "$1" | tr ',' ' '); do
        case ",$(echo "$_m" | cut -d' ' -f4)," in
        *",$_o,"*) ;;
        *) echo "option $_o not in: $_m"; return 1 ;;
        esac
    done
}

copy_in() { cp "$SRC" "$MNT/$SMB_WORKDIR/big.bin" && sync; }
remount() { umount "$MNT" && ! is_mounted && smb_mount "$1"; }
copy_out() {
    rm -f "$BACK"
    cp "$MNT/$SMB_WORKDIR/big.bin" "$BACK" || return 1
    _got="$(sha256_of "$BACK")"
    rm -f "$BACK"
    [ "$_got" = "$SRC_SHA" ] || { echo "sha256 mismatch: got $_got want $SRC_SHA"; return 1; }
}
# Requests of kind OP the server has answered on the share (Quarry's per-share counter).
server_ops() { # OP
    wget -q -O - "$SMB_METRICS_URL" | grep '^quarry_smb_operations_total{' |
        grep "share=\"$SMB_SHARE\"" | grep "op=\"$1\"" | awk '{s += $2} END {print s + 0}'
}
server_reads() { server_ops read; }
# With a read-caching lease the second read of the file never reaches the server.
reread_cached() {
    cat "$MNT/$SMB_WORKDIR/big.bin" >/dev/null || return 1
    _before="$(server_reads)" || return 1
    cat "$MNT/$SMB_WORKDIR/big.bin" >/dev/null || return 1
    _after="$(server_reads)" || return 1
    echo "server READs: $_before before the re-read, $_after after"
    [ "$_before" -gt 0 ] && [ "$_after" = "$_before" ]
}
# With a directory lease on the share root, cifs keeps the root's listing: listing it
# again sends no QUERY_DIRECTORY.
root_listing_cached() {
    ls "$MNT/" >/dev/null || return 1
    ls "$MNT/" >/dev/null || return 1
    _before="$(server_ops query_directory)" || return 1
    ls "$MNT/" >/dev/null || return 1
    _after="$(server_ops query_directory)" || return 1
    echo "server QUERY_DIRECTORYs: $_before before the re-list, $_after after"
    [ "$_before" -gt 0 ] && [ "$_after" = "$_before" ]
}
# A file created in the root over a second connection (its own mount, nosharesock)
# breaks that lease, so the first mount's next listing shows it.
root_listing_fresh() { # OPTS
    _peer="$SMB_WORKDIR-peer"
    mkdir -p "$MNT2" || return 1
    mount -t cifs "//$SMB_ADDR/$SMB_SHARE" "$MNT2" \
        -o "ip=$SMB_ADDR,port=$SMB_PORT,username=$SMB_USER,password=$SMB_PASS,nosharesock,$1" ||
        return 1
    _ok=0
    echo peer >"$MNT2/$_peer" && sync && _ok=1
    umount "$MNT2"
    [ "$_ok" = 1 ] || { echo "the peer mount could not create $_peer"; return 1; }
    if ! ls "$MNT/" | grep -qx "$_peer"; then
        echo "$_peer, created over another connection, is missing from the listing"
        return 1
    fi
    rm -f "$MNT/$_peer"
    echo "the new entry appeared after $(server_ops query_directory) QUERY_DIRECTORYs in all"
}
ls_l() {
    _line="$(ls -l "$MNT/$SMB_WORKDIR/big.bin")" || return 1
    echo "$_line"
    _size="$(echo "$_line" | awk '{print $5}')"
    [ "$_size" = "$SRC_BYTES" ] || { echo "ls -l size $_size, want $SRC_BYTES"; return 1; }
    ls -l "$MNT/" >/dev/null
}
count() { ls "$1" | grep -c "$2"; }
create_files() {
    mkdir "$MNT/$SMB_WORKDIR/many" || return 1
    _i=0
    while [ "$_i" -lt "$SMB_NFILES" ]; do
        echo "file $_i" >"$MNT/$SMB_WORKDIR/many/f$_i" || return 1
        _i=$((_i + 1))
    done
    _n="$(count "$MNT/$SMB_WORKDIR/many" '^f[0-9]*$')"
    [ "$_n" = "$SMB_NFILES" ] || { echo "listed $_n files, want $SMB_NFILES"; return 1; }
}
# Renames: all files move to a sibling directory in one busybox mv (one SMB
# rename each, without a fork per file, which costs ~15 ms under TCG), then
# the first CIFS_RENAME_INDIR of them get new names inside that directory.
CIFS_RENAME_INDIR=50
rename_files() {
    mkdir "$MNT/$SMB_WORKDIR/renamed" || return 1
    mv "$MNT/$SMB_WORKDIR/many/"* "$MNT/$SMB_WORKDIR/renamed/" || return 1
    _n="$(count "$MNT/$SMB_WORKDIR/renamed" '^f[0-9]*$')"
    _old="$(ls "$MNT/$SMB_WORKDIR/many" | wc -l)"
    [ "$_n" = "$SMB_NFILES" ] && [ "$_old" = 0 ] || { echo "after move: $_n moved, $_old left"; return 1; }
    _i=0
    while [ "$_i" -lt "$CIFS_RENAME_INDIR" ] && [ "$_i" -lt "$SMB_NFILES" ]; do
        mv "$MNT/$SMB_WORKDIR/renamed/f$_i" "$MNT/$SMB_WORKDIR/renamed/r$_i" || return 1
        _i=$((_i + 1))
    done
    _r="$(count "$MNT/$SMB_WORKDIR/renamed" '^r[0-9]*$')"
    [ "$_r" = "$_i" ] || { echo "after rename: $_r r*, want $_i"; return 1; }
    if [ "$((SMB_NFILES - 1))" -ge "$_i" ]; then
        _last="$(cat "$MNT/$SMB_WORKDIR/renamed/f$((SMB_NFILES - 1))")"
        [ "$_last" = "file $((SMB_NFILES - 1))" ] || { echo "moved file content: $_last"; return 1; }
    fi
    _first="$(cat "$MNT/$SMB_WORKDIR/renamed/r0")"
    [ "$_first" = "file 0" ] || { echo "renamed file content: $_first"; return 1; }
}
delete_files() {
    rm "$MNT/$SMB_WORKDIR/renamed/"* || return 1
    _n="$(ls "$MNT/$SMB_WORKDIR/renamed" | wc -l)"
    [ "$_n" = 0 ] || { echo "$_n entries left"; return 1; }
    rmdir "$MNT/$SMB_WORKDIR/renamed" "$MNT/$SMB_WORKDIR/many"
}
df_check() {
    _df="$(df -k "$MNT" | tail -n 1)" || return 1
    echo "$_df"
    _size="$(echo "$_df" | awk '{print $2}')"
    [ "$_size" -gt 0 ] 2>/dev/null || { echo "df size '$_size'"; return 1; }
    if [ -n "${SMB_EXPECT_SIZE_KIB:-}" ] && [ "$_size" != "$SMB_EXPECT_SIZE_KIB" ]; then
        echo "df size ${_size} KiB, want $SMB_EXPECT_SIZE_KIB KiB"
        return 1
    fi
}
cleanup() { rm -f "$MNT/$SMB_WORKDIR/big.bin" && rmdir "$MNT/$SMB_WORKDIR"; }
final_umount() { sync && umount "$MNT" && ! is_mounted; }

for opts in $SMB_MOUNTS; do
    tag="$(echo "$opts" | sed 's/vers=//; s/,/+/g')"
    p="cifs.$tag"
    is_mounted && umount -f "$MNT" 2>/dev/null
    run_step "$p.mount" smb_mount "$opts" || continue
    run_step "$p.mount_opts" mount_opts_match "$opts"
    if ! run_step "$p.mkdir" mkdir "$MNT/$SMB_WORKDIR"; then
        umount "$MNT"
        continue
    fi
    t0="$(now)"
    if copy_in; then
        s="$(since "$t0")"
        pass "$p.copy_in" "secs=$s MB/s=$(awk -v b="$SRC_BYTES" -v s="$s" 'BEGIN{printf "%.1f", (s > 0) ? b / s / 1e6 : 0}')"
    else
        fail "$p.copy_in" "secs=$(since "$t0")"
    fi
    run_step "$p.remount" remount "$opts" || continue
    t0="$(now)"
    out="$(copy_out 2>&1)"
    if [ $? -eq 0 ]; then
        s="$(since "$t0")"
        pass "$p.copy_out" "secs=$s MB/s=$(awk -v b="$SRC_BYTES" -v s="$s" 'BEGIN{printf "%.1f", (s > 0) ? b / s / 1e6 : 0}') sha256=$SRC_SHA"
    else
        fail "$p.copy_out" "secs=$(since "$t0") $out"
    fi
    if [ -n "${SMB_METRICS_URL:-}" ]; then
        out="$(reread_cached 2>&1)"
        if [ $? -eq 0 ]; then pass "$p.reread_cached" "$out"; else fail "$p.reread_cached" "$out"; fi
        out="$(root_listing_cached 2>&1)"
        if [ $? -eq 0 ]; then pass "$p.root_listing_cached" "$out"; else fail "$p.root_listing_cached" "$out"; fi
        out="$(root_listing_fresh "$opts" 2>&1)"
        if [ $? -eq 0 ]; then pass "$p.root_listing_fresh" "$out"; else fail "$p.root_listing_fresh" "$out"; fi
    fi
    run_step "$p.ls_l" ls_l
    run_step "$p.create" create_files && run_step "$p.rename" rename_files && run_step "$p.delete" delete_files
    out="$(df_check 2>&1)"
    if [ $? -eq 0 ]; then pass "$p.df" "$(echo "$out" | awk '{print "size_kib="$2" used_kib="$3" avail_kib="$4}')"; else fail "$p.df" "$out"; fi
    run_step "$p.cleanup" cleanup
    run_step "$p.umount" final_umount
done
rm -f "$SRC"
finish_set
