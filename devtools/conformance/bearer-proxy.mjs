// A tiny reverse proxy that adds `Authorization: Bearer <token>` to every request (issue 6).
//
// The conformance suite's server mode cannot send a bearer token (SDK_NOTES "External checkers"), and
// /mcp refuses requests without one. Everything else passes through untouched — method, path, body and
// every header including Host and Origin (the suite's DNS-rebinding checks need our server to see
// them) — and responses are streamed back as they arrive (SSE).
//
// Usage: BEARER_TOKEN=... node bearer-proxy.mjs --upstream http://127.0.0.1:8000 [--port 0]
// Once listening, the first stdout line is JSON: {"port": N}. The token is never printed or logged.

import * as http from 'node:http';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: { upstream: { type: 'string' }, port: { type: 'string', default: '0' } },
});
const token = process.env.BEARER_TOKEN;
if (!args.upstream || !token) {
  console.error('usage: BEARER_TOKEN=... node bearer-proxy.mjs --upstream URL [--port N]');
  process.exit(2);
}
const upstream = new URL(args.upstream);

const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const forward = http.request(
    {
      hostname: upstream.hostname,
      port: upstream.port,
      method: req.method,
      path: req.url,
      headers,
    },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.rawHeaders);
      answer.pipe(res);
    },
  );
  forward.on('error', () => {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
    res.end('upstream unreachable');
  });
  // The client hanging up (a cancelled request) hangs up upstream too.
  res.on('close', () => forward.destroy());
  req.pipe(forward);
});

server.listen(Number(args.port), '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
