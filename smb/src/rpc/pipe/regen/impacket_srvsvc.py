"""Decode SrvsvcPipe's answers with impacket's own srvsvc/DCE-RPC structures."""
import subprocess, struct
from impacket.dcerpc.v5 import srvs as srvsvc, rpcrt
from impacket.dcerpc.v5.ndr import NULL
from impacket.uuid import uuidtup_to_bin

p = subprocess.Popen(["/work/target-smbauth/debug/rpcsrv"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True)
RECORD = []
def send(pdu):
    p.stdin.write(pdu.hex() + "\n"); p.stdin.flush()
    line = p.stdout.readline().split()
    assert line[0] == "OK", line
    out = [bytes.fromhex(x) for x in line[1].split(",")] if len(line) > 1 else []
    RECORD.append((pdu.hex(), [o.hex() for o in out]))
    return out

# Bind exactly as impacket's DCERPC_v5.bind() builds it.
bind = rpcrt.MSRPCBind()
item = rpcrt.CtxItem()
item['AbstractSyntax'] = uuidtup_to_bin(srvsvc.MSRPC_UUID_SRVS) if isinstance(srvsvc.MSRPC_UUID_SRVS, tuple) else srvsvc.MSRPC_UUID_SRVS
item['TransferSyntax'] = uuidtup_to_bin(('8a885d04-1ceb-11c9-9fe8-08002b104860', '2.0'))
item['ContextID'] = 0
item['TransItems'] = 1
bind.addCtxItem(item)
pkt = rpcrt.MSRPCHeader()
pkt['type'] = rpcrt.MSRPC_BIND
pkt['pduData'] = bind.getData()
pkt['call_id'] = 1
[ack_raw] = send(pkt.getData())
ack = rpcrt.MSRPCBindAck(ack_raw)
res = rpcrt.CtxItemResult(ack['ctx_items'][:24])
print("bind_ack result", res['Result'], "max_frag", ack['max_tfrag'], "secaddr", ack['SecondaryAddr'])
assert res['Result'] == 0

call_id = [1]
def call(req, resp_cls):
    call_id[0] += 1
    r = rpcrt.MSRPCRequestHeader()
    r['type'] = rpcrt.MSRPC_REQUEST
    r['flags'] = rpcrt.PFC_FIRST_FRAG | rpcrt.PFC_LAST_FRAG
    r['call_id'] = call_id[0]
    r['ctx_id'] = 0
    r['op_num'] = req.opnum
    r['pduData'] = req.getData()
    frags = send(r.getData())
    stub = b""
    for f in frags:
        h = rpcrt.MSRPCRespHeader(f)
        assert h['type'] == rpcrt.MSRPC_RESPONSE, h['type']
        stub += h['pduData']
    resp = resp_cls(stub)
    return resp

for level in [0, 1, 2, 501, 502]:
    req = srvsvc.NetrShareEnum()
    req['ServerName'] = 'quarry\x00'
    req['InfoStruct']['Level'] = level
    req['InfoStruct']['ShareInfo']['tag'] = level
    key = 'Level%d' % level
    req['InfoStruct']['ShareInfo'][key]['Buffer'] = NULL
    req['PreferedMaximumLength'] = 0xffffffff
    req['ResumeHandle'] = 0
    resp = call(req, srvsvc.NetrShareEnumResponse)
    buf = resp['InfoStruct']['ShareInfo'][key]['Buffer']
    names = []
    for e in buf:
        name = e['shi%d_netname' % level][:-1]
        extra = '' if level == 0 else (e['shi%d_remark' % level][:-1], hex(e['shi%d_type' % level]))
        names.append((name, extra))
    print("enum level", level, "total", resp['TotalEntries'], "err", resp['ErrorCode'], names)
    assert resp['ErrorCode'] == 0 and resp['TotalEntries'] == 3 and names[0][0] == 'datasets'

for level in [0, 1, 2, 501, 502]:
    req = srvsvc.NetrShareGetInfo()
    req['ServerName'] = NULL
    req['NetName'] = 'DATASETS\x00'
    req['Level'] = level
    resp = call(req, srvsvc.NetrShareGetInfoResponse)
    info = resp['InfoStruct']['ShareInfo%d' % level]
    print("getinfo level", level, "err", resp['ErrorCode'], info['shi%d_netname' % level][:-1],
          '' if level == 0 else info['shi%d_remark' % level][:-1])
    assert resp['ErrorCode'] == 0 and info['shi%d_netname' % level] == 'datasets\x00'

req = srvsvc.NetrShareGetInfo()
req['ServerName'] = NULL
req['NetName'] = 'nosuch\x00'
req['Level'] = 1
try:
    resp = call(req, srvsvc.NetrShareGetInfoResponse)
    print("missing share err", hex(resp['ErrorCode']))
    assert resp['ErrorCode'] == 2310
except Exception as e:
    print("missing share decode:", type(e).__name__, e)
    raise
for level in [100, 101]:
    req = srvsvc.NetrServerGetInfo()
    req['ServerName'] = 'quarry\x00'
    req['Level'] = level
    resp = call(req, srvsvc.NetrServerGetInfoResponse)
    info = resp['InfoStruct']['ServerInfo%d' % level]
    print("server info", level, resp['ErrorCode'], info['sv%d_platform_id' % level], info['sv%d_name' % level][:-1],
          '' if level == 100 else (info['sv101_version_major'], info['sv101_version_minor'], hex(info['sv101_type']), info['sv101_comment'][:-1]))
    assert resp['ErrorCode'] == 0 and info['sv%d_name' % level] == 'QUARRY\x00'
print("IMPACKET-DECODE-OK")
import sys
if len(sys.argv) > 1:
    lines = ["//! srvsvc exchanges with requests built by impacket 0.13 (`impacket.dcerpc.v5.srvs`:",
             "//! bind, NetrShareEnum levels 0/1/2/501/502, NetrShareGetInfo levels 0/1/2/501/502",
             "//! for \"DATASETS\", a missing share, NetrServerGetInfo 100/101) and the replies of `SrvsvcPipe` that",
             "//! impacket decoded and checked (names, remarks, types, totals, error codes) when this",
             "//! file was generated. Shares: datasets (\"Training data\"), checkpoints (\"\"), IPC$",
             "//! (\"IPC Service (Quarry)\").", "",
             "pub(super) const IMPACKET_EXCHANGES: &[(&str, &str)] = &["]
    for req, outs in RECORD:
        lines.append('    (\n        "%s",\n        "%s",\n    ),' % (req, "".join(outs)))
    lines.append("];")
    open(sys.argv[1], "w").write("\n".join(lines) + "\n")
