"""Minimal pcap -> SMB2 message extractor for loopback captures (no retransmits expected)."""
import struct, sys
from collections import defaultdict, OrderedDict

def tcp_streams(path):
    data = open(path, 'rb').read()
    magic, = struct.unpack('<I', data[:4])
    assert magic in (0xa1b2c3d4, 0xa1b23c4d), hex(magic)
    linktype, = struct.unpack('<I', data[20:24])
    off = 24
    streams = OrderedDict()
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack('<IIII', data[off:off+16]); off += 16
        pkt = data[off:off+incl]; off += incl
        if linktype == 1:
            pkt = pkt[14:]
        elif linktype == 113:
            pkt = pkt[16:]
        ihl = (pkt[0] & 0xf) * 4
        total, = struct.unpack('>H', pkt[2:4])
        src, dst = pkt[12:16], pkt[16:20]
        tcp = pkt[ihl:total]
        sport, dport, seq = struct.unpack('>HHI', tcp[:8])
        doff = (tcp[12] >> 4) * 4
        payload = tcp[doff:]
        key = (sport, dport)
        st = streams.setdefault(key, {'next': None, 'buf': bytearray()})
        if not payload:
            continue
        if st['next'] is not None and seq < st['next']:
            continue  # retransmit
        st['buf'] += payload
        st['next'] = seq + len(payload)
    return streams

def smb_messages(buf):
    """Split a direction's byte stream into (nbss payloads) then SMB2 messages (compound aware)."""
    out = []
    off = 0
    while off + 4 <= len(buf):
        ln = struct.unpack('>I', buf[off:off+4])[0] & 0xffffff
        frame = bytes(buf[off+4:off+4+ln]); off += 4 + ln
        # compound split
        p = 0
        while True:
            msg = frame[p:]
            if msg[:4] != b'\xfeSMB':
                out.append(msg); break
            nxt, = struct.unpack('<I', msg[20:24])
            out.append(msg[:nxt] if nxt else msg)
            if not nxt: break
            p += nxt
    return out

def security_buffer(msg, request):
    cmd, = struct.unpack('<H', msg[12:14])
    body = msg[64:]
    if request:
        off, ln = struct.unpack('<HH', body[12:16])
    else:
        off, ln = struct.unpack('<HH', body[4:8])
    return msg[off:off+ln]
