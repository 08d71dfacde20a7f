// A small local hop in front of the controller's /mcp that adds the bearer header, as a
// deployment's gateway would: the conformance suite sends no token of its own, and auth stays
// on (a request that has credentials keeps its own). Given several upstreams (comma-separated), it sends each request to the next one in
// turn: a load balancer with no session affinity in front of replicas.
// Usage: node mcp_auth_hop.mjs UPSTREAM_URL[,UPSTREAM_URL...] TOKEN; prints "LISTENING <port>".
import http from 'node:http';

const [upstreams, token] = process.argv.slice(2);
const targets = upstreams.split(',').map((u) => new URL(u));
let next = 0;
const server = http.createServer((req, res) => {
  const target = targets[next++ % targets.length];
  // A client's own credentials pass as they are; a request without any gets the hop's.
  const authorization = req.headers.authorization ?? `Bearer ${token}`;
  const headers = { ...req.headers, authorization, host: target.host };
  const out = http.request(
    { host: target.hostname, port: target.port, path: req.url, method: req.method, headers },
    (back) => {
      res.writeHead(back.statusCode, { ...back.headers, 'x-upstream': target.host });
      back.pipe(res);
    },
  );
  out.on('error', (e) => {
    res.writeHead(502, { 'content-type': 'text/plain' });
    res.end(String(e));
  });
  req.pipe(out);
  res.on('close', () => out.destroy());
});
server.listen(0, '127.0.0.1', () => console.log(`LISTENING ${server.address().port}`));
