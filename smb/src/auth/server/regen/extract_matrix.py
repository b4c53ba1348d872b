import sys, glob, struct
sys.path.insert(0, '/tmp/smbauth/interop')
from pcap_smb import *

def ctx(neg_resp, want):
    body = neg_resp[64:]
    dialect, = struct.unpack('<H', body[4:6])
    if dialect != 0x0311: return None
    cnt, = struct.unpack('<H', body[6:8]); off, = struct.unpack('<I', body[60:64])
    p = off
    for i in range(cnt):
        t, ln = struct.unpack('<HH', neg_resp[p:p+4])
        data = neg_resp[p+8:p+8+ln]
        if t == want: return struct.unpack('<H', data[2:4])[0]
        p += 8 + ln; p = (p + 7) & ~7
    return None

def hexlit(b):
    h = b.hex(); chunks = [h[j:j+96] for j in range(0, len(h), 96)]
    return '"' + '\\\n            '.join(chunks) + '"'

out = ['//! smbclient 4.17 -> smbd 4.17 sessions captured on loopback (tcpdump), one per dialect and',
       '//! protection mode (`-m SMB2_10|SMB3_00|SMB3_11`, `--client-protection=sign|encrypt`, and',
       '//! `client smb3 encryption algorithms` / `client smb3 signing algorithms` to force each',
       '//! cipher and CMAC), user alice / "Secret#123". For each: the messages that feed the',
       '//! preauth hash, the signed final SESSION_SETUP response, and (when encrypted) the first',
       '//! sealed frame in each direction.', '',
       'pub(super) struct Capture {',
       '    pub name: &\'static str,',
       '    pub dialect: u16,',
       '    /// Cipher id from the negotiation (0 = none; 3.0 encryption is AES-128-CCM = 1).',
       '    pub cipher: u16,',
       '    /// SigningAlgorithmId from SMB2_SIGNING_CAPABILITIES, or u16::MAX if not negotiated.',
       '    pub signing_alg: u16,',
       '    /// NEGOTIATE req/resp, SESSION_SETUP req/resp x2.',
       '    pub messages: [&\'static str; 6],',
       '    pub client_sealed: &\'static str,',
       '    pub server_sealed: &\'static str,',
       '}', '',
       'pub(super) const CAPTURES: &[Capture] = &[']
names = ['smb2_10', 'smb3_00', 'smb3_00_enc', 'smb3_11_aes-128-ccm', 'smb3_11_aes-128-gcm',
         'smb3_11_aes-256-ccm', 'smb3_11_aes-256-gcm', 'smb3_11_cmac']
for name in names:
    st = tcp_streams('/tmp/smbauth/samba/cap_%s.pcap' % name)
    keys = list(st.keys())
    c = smb_messages(st[keys[0]]['buf']); s = smb_messages(st[keys[1]]['buf'])
    cs = [m for m in c if m[:4] == b'\xfeSMB']; ss = [m for m in s if m[:4] == b'\xfeSMB']
    neg_req, neg_resp = cs[0], ss[0]
    dialect, = struct.unpack('<H', neg_resp[64+4:64+6])
    ssr = [m for m in cs if struct.unpack('<H', m[12:14])[0] == 1]
    ssp = [m for m in ss if struct.unpack('<H', m[12:14])[0] == 1]
    assert len(ssr) == 2 and len(ssp) == 2, (name, len(ssr), len(ssp))
    cipher = ctx(neg_resp, 2) or 0
    if 'enc' in name and dialect != 0x0311: cipher = 1
    sig = ctx(neg_resp, 8)
    csealed = next((m for m in c if m[:4] == b'\xfdSMB'), b'')
    ssealed = next((m for m in s if m[:4] == b'\xfdSMB'), b'')
    print(name, hex(dialect), 'cipher', cipher, 'sig', sig, 'sealed', len(csealed), len(ssealed),
          'final status', hex(struct.unpack('<I', ssp[1][8:12])[0]), 'flags', hex(struct.unpack('<I', ssp[1][16:20])[0]))
    out.append('    Capture {')
    out.append('        name: "%s",' % name)
    out.append('        dialect: 0x%04x,' % dialect)
    out.append('        cipher: %d,' % cipher)
    out.append('        signing_alg: %s,' % ('u16::MAX' if sig is None else str(sig)))
    out.append('        messages: [')
    for m in [neg_req, neg_resp, ssr[0], ssp[0], ssr[1], ssp[1]]:
        out.append('            %s,' % hexlit(m))
    out.append('        ],')
    out.append('        client_sealed: %s,' % hexlit(csealed))
    out.append('        server_sealed: %s,' % hexlit(ssealed))
    out.append('    },')
out.append('];')
open(sys.argv[1], 'w').write('\n'.join(out) + '\n')
