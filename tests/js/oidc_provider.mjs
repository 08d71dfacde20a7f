// A real OpenID provider for the controller's OIDC tests: `oidc-provider` (the OpenID-certified
// Node.js server, from the npm registry), configured here, served over https with a certificate
// of a private CA the test made. Nothing of it is imitated: discovery, the JWKS, the token
// endpoint and the JWT access tokens are oidc-provider's own.
//
// Usage: node oidc_provider.mjs STATE_DIR PORT AUDIENCE KIDS
//   STATE_DIR holds server.pem / server.key (the https certificate) and the signing keys, one
//             <kid>.jwk each, made on first use and kept, so a restart with other KIDS is a
//             key rotation at the provider (the same issuer, the same keys by the same names).
//   KIDS      the signing keys published, in order, comma-separated: rsa-* (RSA 2048, signs
//             RS256 and PS256), ec-* (P-256, ES256), ed-* (Ed25519, EdDSA). oidc-provider signs
//             with the first published key of the algorithm asked for.
//
// Clients (client credentials grant, client_secret_post, secret "secret-<id>"), each asking
// for JWT access tokens for resource AUDIENCE signed with one algorithm: rs256, ps256, es256,
// eddsa; hs256 (HMAC with a shared secret: the controller must refuse it); no-tenant (RS256,
// without the tenant claim); other-audience (a token for resource https://other.example).
// Every token carries `tenant: team-op` unless said.
//
// Prints one JSON line {"issuer", "control"}, then serves until stdin closes. The control
// port (plain http, loopback) answers GET /token/<client> with a fresh access token and GET
// /hits with how many times the JWKS was fetched.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as path from 'node:path';

import Provider, { errors } from 'oidc-provider';

const [stateDir, port, audience, kids] = process.argv.slice(2);
const issuer = `https://127.0.0.1:${port}`;
const OTHER = 'https://other.example';

function signingKey(kid) {
  const file = path.join(stateDir, `${kid}.jwk`);
  if (fs.existsSync(file)) return JSON.parse(fs.readFileSync(file, 'utf8'));
  let pair;
  if (kid.startsWith('rsa-')) pair = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  else if (kid.startsWith('ec-')) pair = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  else if (kid.startsWith('ed-')) pair = crypto.generateKeyPairSync('ed25519');
  else throw new Error(`unknown key kind: ${kid}`);
  const jwk = { ...pair.privateKey.export({ format: 'jwk' }), kid, use: 'sig' };
  fs.writeFileSync(file, JSON.stringify(jwk), { mode: 0o600 });
  return jwk;
}

const clients = {
  rs256: 'RS256', ps256: 'PS256', es256: 'ES256', eddsa: 'EdDSA', hs256: 'HS256',
  'no-tenant': 'RS256', 'other-audience': 'RS256',
};

const provider = new Provider(issuer, {
  clients: Object.keys(clients).map((id) => ({
    client_id: id,
    client_secret: `secret-${id}`,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    token_endpoint_auth_method: 'client_secret_post',
  })),
  jwks: { keys: kids.split(',').map(signingKey) },
  scopes: ['workers'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: (ctx, client) => (client.clientId === 'other-audience' ? OTHER : audience),
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource, client) => {
        if (resource !== audience && resource !== OTHER) throw new errors.InvalidTarget();
        const alg = clients[client.clientId];
        const sign = alg === 'HS256' ? { alg, key: Buffer.from('a shared secret, not a key pair') } : { alg };
        return {
          scope: 'workers',
          audience: resource,
          accessTokenTTL: 300,
          accessTokenFormat: 'jwt',
          jwt: { sign },
        };
      },
    },
  },
  extraTokenClaims: (ctx, token) => (token.clientId === 'no-tenant' ? undefined : { tenant: 'team-op' }),
});
provider.on('server_error', (ctx, err) => console.error(`oidc-provider: ${err.stack}`));

let hits = 0;
const callback = provider.callback();
const server = https.createServer(
  {
    key: fs.readFileSync(path.join(stateDir, 'server.key')),
    cert: fs.readFileSync(path.join(stateDir, 'server.pem')),
  },
  (req, res) => {
    if (req.url.startsWith('/jwks')) hits += 1;
    callback(req, res);
  },
);

// Tokens are asked of the provider's own token endpoint, over its https, trusting the CA.
const ca = fs.readFileSync(path.join(stateDir, 'ca.pem'));
function token(client) {
  const body = new URLSearchParams({
    grant_type: 'client_credentials',
    client_id: client,
    client_secret: `secret-${client}`,
    scope: 'workers',
  }).toString();
  return new Promise((resolve, reject) => {
    const req = https.request(`${issuer}/token`, {
      method: 'POST',
      ca,
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(text).access_token) : reject(new Error(`${res.statusCode} ${text}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const control = http.createServer(async (req, res) => {
  try {
    if (req.url === '/hits') {
      res.end(JSON.stringify({ hits }));
    } else if (req.url.startsWith('/token/')) {
      res.end(await token(decodeURIComponent(req.url.slice('/token/'.length))));
    } else {
      res.statusCode = 404;
      res.end('no such control path');
    }
  } catch (e) {
    res.statusCode = 500;
    res.end(String(e));
  }
});

server.listen(Number(port), '127.0.0.1', () => {
  control.listen(0, '127.0.0.1', () => {
    console.log(JSON.stringify({ issuer, control: `127.0.0.1:${control.address().port}` }));
  });
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
