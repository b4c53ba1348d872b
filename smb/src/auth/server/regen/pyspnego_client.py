"""Drive the Rust NtlmServer (authsrv) with pyspnego as a real client; record the tokens."""
import json, subprocess, sys
import spnego

SRV = "/work/target-smbauth/debug/authsrv"
CHALLENGE = "0123456789abcdef"
NOW = 133000000000000000  # a FILETIME in 2022

def run(protocol, client_pw, server_pw="Secret#123", user="alice", domain="WORKGROUP"):
    p = subprocess.Popen([SRV, CHALLENGE, str(NOW), user, server_pw], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    c = spnego.client(user, client_pw, hostname="quarry", service="cifs", protocol=protocol)
    legs = []
    tok = c.step()
    while True:
        p.stdin.write(tok.hex() + "\n"); p.stdin.flush()
        line = p.stdout.readline().split()
        legs.append({"client": tok.hex(), "server": line})
        if line[0] == "CONTINUE":
            tok = c.step(bytes.fromhex(line[1]))
            continue
        if line[0] == "DONE":
            if line[1] != "-":
                c.step(bytes.fromhex(line[1]))  # client verifies our mechListMIC here
            ok = c.complete and c.session_key.hex() == line[2]
            return {"protocol": protocol, "result": "done", "client_complete": c.complete,
                    "client_session_key": c.session_key.hex(), "server": line, "legs": legs, "ok": ok}
        return {"protocol": protocol, "result": "error", "server": line, "legs": legs}

out = {}
for proto in ["negotiate", "ntlm"]:
    out[proto + "_good"] = run(proto, "Secret#123")
    out[proto + "_bad"] = run(proto, "wrong-password")
for k, v in out.items():
    print(k, v["result"], v.get("ok"), " ".join(v["server"][:1] + v["server"][2:3]))
json.dump({"challenge": CHALLENGE, "now": NOW, "user": "alice", "password": "Secret#123", "runs": out},
          open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/smbauth/interop/pyspnego.json", "w"), indent=1)
