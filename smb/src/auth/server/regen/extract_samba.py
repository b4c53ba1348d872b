import sys; sys.path.insert(0,'/tmp/smbauth/interop')
from pcap_smb import *
st = tcp_streams('/tmp/smbauth/samba/cap_auth.pcap')
keys=list(st.keys())
def conv(i):
    c = [m for m in smb_messages(st[keys[2*i]]['buf']) if m[:4]==b'\xfeSMB']
    s = [m for m in smb_messages(st[keys[2*i+1]]['buf']) if m[:4]==b'\xfeSMB']
    return c, s
def sigalg(neg_resp):
    body = neg_resp[64:]
    cnt, = struct.unpack('<H', body[6:8]); off, = struct.unpack('<I', body[60:64])
    p = off
    for i in range(cnt):
        t, ln = struct.unpack('<HH', neg_resp[p:p+4])
        data = neg_resp[p+8:p+8+ln]
        if t == 8: return struct.unpack('<H', data[2:4])[0]
        p += 8 + ln; p = (p + 7) & ~7
    return None
lines = ['//! A real exchange captured on loopback (tcpdump) between Debian 12\'s `smbclient` 4.17',
'//! (`-m SMB3_11`, user alice, password "Secret#123") and Samba 4.17 `smbd`: every message',
'//! that feeds the SMB 3.1.1 preauth hash, plus the final SESSION_SETUP response that smbd',
'//! signed with the keys it derived. `WRONG_*` is the same client with a wrong password.','']
for name, i in [('GOOD', 0), ('WRONG', 2)]:
    c, s = conv(i)
    msgs = [c[0], s[0], c[1], s[1], c[2], s[2]]
    names = ['NEG_REQ','NEG_RESP','SS1_REQ','SS1_RESP','SS2_REQ','SS2_RESP']
    for n, m in zip(names, msgs):
        if name == 'WRONG' and n.startswith('NEG'):
            continue
        h = m.hex()
        chunks = [h[j:j+96] for j in range(0, len(h), 96)]
        lines.append('pub(super) const %s_%s: &str = "%s";' % (name, n, '\\\n    '.join(chunks)))
    lines.append('')
    if name=='GOOD':
        print('sig alg', sigalg(s[0]), 'status', [hex(struct.unpack('<I',m[8:12])[0]) for m in msgs])
        lines.append('/// SigningAlgorithmId smbd selected in its SMB2_SIGNING_CAPABILITIES context.')
        lines.append('pub(super) const GOOD_SIGNING_ALG: u16 = %d;' % sigalg(s[0]))
        lines.append('')
open(sys.argv[1],'w').write('\n'.join(lines))
