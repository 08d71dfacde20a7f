// A small local hop in front of the controller's /mcp that adds the bearer header, as a
// deployment's gateway would: the conformance suite sends no token of its own, and auth stays
// on. Usage: node mcp_auth_hop.mjs UPSTREAM_URL TOKEN; prints "LISTENING <port>".
import http from 'node:http';

const [upstream, token] = process.argv.slice(2);
const target = new URL(upstream);
const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}`, host: target.host };
  const out = http.request(
    { host: target.hostname, port: target.port, path: req.url, method: req.method, headers },
    (back) => {
      res.writeHead(back.statusCode, back.headers);
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
