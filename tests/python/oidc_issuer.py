"""A stand-in OIDC issuer for the controller's tests: discovery and a JWKS over HTTP on
loopback, with keys and tokens made here (Python's `cryptography`).

Usage: python oidc_issuer.py AUDIENCE [--foreign-jwks]

Prints one JSON line: {"issuer", "tokens": {name: jwt}, "rotated": jwt, "rotated_again": jwt},
then serves until stdin closes. GET /rotate publishes the second RSA key (tokens of "rotated"
verify from then on; "rotated_again" names a kid never published); GET /hits says how many
times the JWKS was fetched. With --foreign-jwks the discovery document names a JWKS on another
origin (localhost instead of 127.0.0.1), which the controller must refuse.
"""

import base64
import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def uint(n: int) -> str:
    return b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


audience = sys.argv[1]
foreign = "--foreign-jwks" in sys.argv
rsa1 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
rsa2 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ec1 = ec.generate_private_key(ec.SECP256R1())
rsa_ps = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ed1 = ed25519.Ed25519PrivateKey.generate()


def rsa_jwk(key, kid):
    n = key.public_key().public_numbers()
    return {"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": uint(n.n), "e": uint(n.e)}


def ec_jwk(key, kid):
    n = key.public_key().public_numbers()
    return {"kty": "EC", "kid": kid, "use": "sig", "crv": "P-256",
            "x": b64(n.x.to_bytes(32, "big")), "y": b64(n.y.to_bytes(32, "big"))}


def ed_jwk(key, kid):
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"kty": "OKP", "kid": kid, "use": "sig", "crv": "Ed25519", "x": b64(raw)}


# rsa-ps has no "alg" in its JWK (PS256 and RS256 both verify with it); rsa-1 is pinned to RS256.
ps_jwk = rsa_jwk(rsa_ps, "rsa-ps")
del ps_jwk["alg"]
jwks = {"keys": [rsa_jwk(rsa1, "rsa-1"), ec_jwk(ec1, "ec-1"), ps_jwk, ed_jwk(ed1, "ed-1")]}
hits = 0


def sign(header, claims, key=None):
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}".encode()
    alg = header["alg"]
    if alg == "RS256":
        sig = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    elif alg == "PS256":
        pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)
        sig = key.sign(signing_input, pss, hashes.SHA256())
    elif alg == "EdDSA":
        sig = key.sign(signing_input)
    elif alg == "ES256":
        r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    elif alg == "HS256":
        sig = hmac.new(key, signing_input, hashlib.sha256).digest()
    else:
        sig = b""
    return f"{signing_input.decode()}.{b64(sig)}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send_json(self, doc):
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        global hits
        if self.path == "/.well-known/openid-configuration":
            base = f"http://localhost:{port}" if foreign else issuer
            self.send_json({"issuer": issuer, "jwks_uri": f"{base}/jwks"})
        elif self.path == "/jwks":
            hits += 1
            self.send_json(jwks)
        elif self.path == "/rotate":
            jwks["keys"].append(rsa_jwk(rsa2, "rsa-2"))
            self.send_json({"ok": True})
        elif self.path == "/hits":
            self.send_json({"hits": hits})
        else:
            self.send_error(404)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
port = server.server_address[1]
issuer = f"http://127.0.0.1:{port}"
now = int(time.time())
good = {"iss": issuer, "aud": audience, "sub": "svc-ci", "tenant": "team-o", "iat": now, "exp": now + 600}
rs = {"alg": "RS256", "typ": "JWT", "kid": "rsa-1"}
es = {"alg": "ES256", "typ": "JWT", "kid": "ec-1"}
public_pem = rsa1.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
ok = sign(rs, good, rsa1)
head, payload, sig = ok.split(".")
tampered_claims = dict(good, tenant="team-x")
tokens = {
    "rs256": ok,
    "es256": sign(es, dict(good, sub="svc-es"), ec1),
    "ps256": sign({"alg": "PS256", "typ": "JWT", "kid": "rsa-ps"}, dict(good, sub="svc-ps"), rsa_ps),
    "eddsa": sign({"alg": "EdDSA", "typ": "JWT", "kid": "ed-1"}, dict(good, sub="svc-ed"), ed1),
    "ps256_on_a_key_pinned_to_rs256": sign({"alg": "PS256", "typ": "JWT", "kid": "rsa-1"}, good, rsa1),
    "audience_list": sign(rs, dict(good, aud=["other", audience]), rsa1),
    "expired": sign(rs, dict(good, exp=now - 3600), rsa1),
    "not_yet_valid": sign(rs, dict(good, nbf=now + 3600), rsa1),
    "wrong_issuer": sign(rs, dict(good, iss="http://127.0.0.1:1"), rsa1),
    "wrong_audience": sign(rs, dict(good, aud="someone-else"), rsa1),
    "alg_none": sign({"alg": "none", "typ": "JWT", "kid": "rsa-1"}, good),
    "hs256_public_key": sign({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, good, public_pem),
    "es256_header_on_rsa_key": sign({"alg": "ES256", "typ": "JWT", "kid": "rsa-1"}, good, ec1),
    "unknown_kid": sign({"alg": "RS256", "typ": "JWT", "kid": "nobody"}, good, rsa1),
    "tampered": f"{head}.{b64(json.dumps(tampered_claims).encode())}.{sig}",
    "no_scope_claim": sign(rs, {k: v for k, v in good.items() if k != "tenant"}, rsa1),
    "bad_scope": sign(rs, dict(good, tenant="Team O"), rsa1),
    "no_exp": sign(rs, {k: v for k, v in good.items() if k != "exp"}, rsa1),
}
rotated = sign({"alg": "RS256", "typ": "JWT", "kid": "rsa-2"}, dict(good, sub="svc-rotated"), rsa2)
rotated_again = sign({"alg": "RS256", "typ": "JWT", "kid": "rsa-3"}, good, rsa2)
print(json.dumps({"issuer": issuer, "tokens": tokens, "rotated": rotated,
                  "rotated_again": rotated_again}), flush=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.read()
