// A Keycloak-shaped OpenID provider for tests and the local demo (issue 6).
//
// Keycloak itself is not obtainable on this machine (SDK_NOTES "Identity provider"), so this script
// emulates the parts of its shape the product relies on, on top of the certified `oidc-provider`:
//   - realm paths: /realms/tjwater/.well-known/openid-configuration and
//     /realms/tjwater/protocol/openid-connect/{auth,token,certs,userinfo,logout};
//   - RS256 JWT access tokens with header `typ: JWT` (not `at+jwt`) and an `azp` claim;
//   - `resource=` (RFC 8707) mapped to the audience: any resource whose path ends in /mcp, or
//     urn:tjwater:mcp (the default), becomes aud=<audience>; any other resource is its own audience;
//   - confidential client tjwater-agent-mcp: client_credentials (only mcp.catalog.read) and RFC 8693
//     token exchange of a user's access token (sub kept, azp=tjwater-agent-mcp, aud=<audience>,
//     scope "mcp.query mcp.context.bind", or what `scope=` asks for among the three MCP scopes);
//   - confidential client tjwater-worker: client_credentials; its service token can be exchanged by
//     tjwater-agent-mcp like a user's (sub = tjwater-worker), for investigations;
//   - confidential client tjwater-admin: authorization code + PKCE for the Django admin login;
//   - public client tjwater-host: authorization code + PKCE, how tests get a *user* access token;
//   - users alice (realm role tjwater-operator) and bob (no role), a real login form;
//   - key rotation on demand: POST /admin/rotate[?drop_old=1] with `Authorization: Bearer <secret>`.
//
// Usage: node provider.mjs [--port N] [--audience A]   (or IDP_PORT, IDP_AUDIENCE, ...; see README)
// Port 0 picks a free port. Once listening, the first stdout line is JSON: {"issuer": ..., "port": ...}.
// Loopback redirect URIs match on any port (RFC 8252 §7.3), because the servers under test listen on
// ports chosen at run time. Never expose this provider beyond 127.0.0.1: its secrets are dev defaults.

import * as crypto from 'node:crypto';
import * as http from 'node:http';
import { parseArgs } from 'node:util';

import { createLocalJWKSet, exportJWK, generateKeyPair, jwtVerify } from 'jose';
import Provider, { errors } from 'oidc-provider';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string' },
    host: { type: 'string' },
    audience: { type: 'string' },
  },
});

const env = process.env;
const HOST = args.host ?? env.IDP_HOST ?? '127.0.0.1';
const PORT = Number(args.port ?? env.IDP_PORT ?? 0);
const AUDIENCE = args.audience ?? env.IDP_AUDIENCE ?? 'tjwater-mcp';
const REALM = env.IDP_REALM ?? 'tjwater';
const REALM_PATH = `/realms/${REALM}`;
const ADMIN_SECRET = env.IDP_ADMIN_SECRET ?? ''; // empty: the /admin endpoints are off
const AGENT_SECRET = env.IDP_AGENT_SECRET ?? 'tjwater-agent-mcp-dev-secret';
const WORKER_SECRET = env.IDP_WORKER_SECRET ?? 'tjwater-worker-dev-secret';
// Service accounts whose client_credentials tokens tjwater-agent-mcp may exchange (the investigation
// worker's identity, Keycloak's service-account user; here its `sub` is the client id).
const SERVICE_ACCOUNTS = new Set(['tjwater-worker']);
const ADMIN_CLIENT_SECRET = env.IDP_ADMIN_CLIENT_SECRET ?? 'tjwater-admin-dev-secret';
const OPERATOR_ROLE = env.IDP_OPERATOR_ROLE ?? 'tjwater-operator';
const ACCESS_TOKEN_TTL = Number(env.IDP_ACCESS_TOKEN_TTL ?? 300);

const MCP_RESOURCE = 'urn:tjwater:mcp';
const HOST_RESOURCE = 'urn:tjwater:host';
const MCP_SCOPES = ['mcp.catalog.read', 'mcp.query', 'mcp.context.bind'];
const CATALOG_SCOPE = 'mcp.catalog.read';
const EXCHANGED_SCOPES = ['mcp.query', 'mcp.context.bind'];
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';

// Fixed Keycloak-style (UUID) subjects, so principals seeded for them keep matching across runs.
const USERS = {
  alice: {
    sub: 'a11ce000-0000-4000-8000-000000000001',
    password: env.IDP_ALICE_PASSWORD ?? 'alice-password',
    name: 'Alice Operator',
    email: 'alice@tjwater.test',
    roles: [OPERATOR_ROLE],
  },
  bob: {
    sub: 'b0b00000-0000-4000-8000-000000000002',
    password: env.IDP_BOB_PASSWORD ?? 'bob-password',
    name: 'Bob Analyst',
    email: 'bob@tjwater.test',
    roles: [],
  },
};
const USERS_BY_SUB = Object.fromEntries(Object.entries(USERS).map(([username, u]) => [u.sub, { username, ...u }]));

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

function loopbackWithoutPort(value) {
  const url = URL.parse(value);
  if (!url || url.protocol !== 'http:' || !LOOPBACK.has(url.hostname)) return undefined;
  url.port = '';
  return url.href;
}

// --- keys ---------------------------------------------------------------------------------------
async function newSigningKey() {
  const { privateKey } = await generateKeyPair('RS256', { extractable: true, modulusLength: 2048 });
  const jwk = await exportJWK(privateKey);
  return { ...jwk, kid: crypto.randomUUID(), alg: 'RS256', use: 'sig' };
}

let keys = [await newSigningKey()]; // keys[0] signs; the rest are still published for verification

function publicJwks() {
  return {
    keys: keys.map(({ kty, n, e, kid, alg, use }) => ({ kty, n, e, kid, alg, use })),
  };
}

// --- the provider -------------------------------------------------------------------------------
const cookieKeys = [crypto.randomBytes(32).toString('base64url')];

function resourceServerInfo(indicator, grantType) {
  const url = URL.parse(indicator);
  const isMcp = indicator === MCP_RESOURCE || (url?.pathname ?? '').endsWith('/mcp');
  return {
    audience: isMcp ? AUDIENCE : indicator,
    // client_credentials gets the catalog scope only: a service identity lists tools, it does not
    // query data without a user's delegation (token exchange).
    scope: grantType === 'client_credentials' ? CATALOG_SCOPE : MCP_SCOPES.join(' '),
    accessTokenFormat: 'jwt',
    accessTokenTTL: ACCESS_TOKEN_TTL,
    jwt: { sign: { alg: 'RS256' } },
  };
}

function buildProvider(issuer) {
  const configuration = {
    jwks: { keys },
    cookies: { keys: cookieKeys },
    clients: [
      {
        client_id: 'tjwater-agent-mcp',
        client_secret: AGENT_SECRET,
        grant_types: ['client_credentials', TOKEN_EXCHANGE],
        response_types: [],
        redirect_uris: [],
        token_endpoint_auth_method: 'client_secret_basic',
      },
      {
        // The investigation worker's own client: its service token is the product credential the agent
        // host exchanges for an /mcp token (seed 001 "后台调查不依赖浏览器").
        client_id: 'tjwater-worker',
        client_secret: WORKER_SECRET,
        grant_types: ['client_credentials'],
        response_types: [],
        redirect_uris: [],
        token_endpoint_auth_method: 'client_secret_basic',
      },
      {
        client_id: 'tjwater-admin',
        client_secret: ADMIN_CLIENT_SECRET,
        grant_types: ['authorization_code'],
        response_types: ['code'],
        redirect_uris: (env.IDP_ADMIN_REDIRECT_URIS ?? 'http://127.0.0.1/oidc/callback/').split(' '),
        post_logout_redirect_uris: (env.IDP_ADMIN_POST_LOGOUT_REDIRECT_URIS ?? 'http://127.0.0.1/oidc/signed-out/ http://127.0.0.1/admin/').split(' '),
        token_endpoint_auth_method: 'client_secret_post',
      },
      {
        client_id: 'tjwater-host',
        grant_types: ['authorization_code'],
        response_types: ['code'],
        redirect_uris: ['http://127.0.0.1/callback'],
        token_endpoint_auth_method: 'none',
      },
    ],
    clientAuthMethods: ['client_secret_basic', 'client_secret_post', 'none'],
    pkce: { required: () => true }, // S256 only is the library default
    scopes: ['openid', 'offline_access', 'profile', 'email', 'roles'],
    claims: {
      openid: ['sub'],
      profile: ['name', 'preferred_username'],
      email: ['email', 'email_verified'],
      roles: ['realm_access'],
    },
    routes: {
      authorization: '/protocol/openid-connect/auth',
      token: '/protocol/openid-connect/token',
      jwks: '/protocol/openid-connect/certs',
      userinfo: '/protocol/openid-connect/userinfo',
      end_session: '/protocol/openid-connect/logout',
      introspection: '/protocol/openid-connect/token/introspect',
      revocation: '/protocol/openid-connect/revoke',
    },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      // OpenID Connect RP-Initiated Logout 1.0 at .../protocol/openid-connect/logout, like Keycloak: with
      // a valid id_token_hint the user is signed out without a question (the page submits itself);
      // without one (only client_id) the user is asked to confirm.
      rpInitiatedLogout: { enabled: true, logoutSource },
      resourceIndicators: {
        enabled: true,
        // The admin login needs an opaque token for userinfo (no resource); everyone else gets a
        // JWT for a resource server. tjwater-host users get a token for the host, not for /mcp.
        defaultResource: (ctx, client) => {
          if (client.clientId === 'tjwater-admin') return undefined;
          if (client.clientId === 'tjwater-host' || client.clientId === 'tjwater-worker') return HOST_RESOURCE;
          return MCP_RESOURCE;
        },
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator) => resourceServerInfo(indicator, ctx.oidc.params?.grant_type),
      },
    },
    ttl: { AccessToken: ACCESS_TOKEN_TTL, ClientCredentials: ACCESS_TOKEN_TTL, IdToken: 300, Session: 3600 },
    interactions: { url: (ctx, interaction) => `${REALM_PATH}/login-actions/authenticate/${interaction.uid}` },
    findAccount: (ctx, sub) => {
      const user = USERS_BY_SUB[sub];
      if (!user) return undefined;
      return {
        accountId: sub,
        claims: () => ({
          sub,
          name: user.name,
          preferred_username: user.username,
          email: user.email,
          email_verified: true,
          realm_access: { roles: user.roles },
        }),
      };
    },
    // First-party clients are pre-consented, as in a Keycloak realm with consent turned off.
    loadExistingGrant: async (ctx) => {
      const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) return ctx.oidc.provider.Grant.find(grantId);
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope('openid profile email roles');
      grant.addOIDCClaims(['realm_access', 'preferred_username']);
      for (const resource of [MCP_RESOURCE, HOST_RESOURCE]) grant.addResourceScope(resource, MCP_SCOPES.join(' '));
      await grant.save();
      return grant;
    },
    extraTokenClaims: (ctx, token) => {
      const user = token.accountId ? USERS_BY_SUB[token.accountId] : undefined;
      if (!user) return undefined;
      return { preferred_username: user.username, realm_access: { roles: user.roles } };
    },
    formats: {
      customizers: {
        // Keycloak's access tokens: `typ: JWT` and `azp` = the client the token was issued to.
        jwt: (ctx, token, jwt) => {
          jwt.header = { typ: 'JWT' };
          jwt.payload.azp = jwt.payload.client_id;
          if (token.kind === 'ClientCredentials' && !jwt.payload.scope && token.resourceServer) {
            // Keycloak grants the client's default scopes when none are requested.
            jwt.payload.scope = token.resourceServer.scope;
          }
        },
      },
    },
    renderError: (ctx, out) => {
      ctx.type = 'html';
      ctx.body = page('Error', `<p>${escapeHtml(out.error)}: ${escapeHtml(out.error_description ?? '')}</p>`);
    },
  };

  const provider = new Provider(issuer, configuration);
  provider.proxy = false;

  // Loopback redirect URIs match on any port (RFC 8252 §7.3) — see the header comment.
  const original = provider.Client.prototype.redirectUriAllowed;
  provider.Client.prototype.redirectUriAllowed = function redirectUriAllowed(value) {
    if (original.call(this, value)) return true;
    const stripped = loopbackWithoutPort(value);
    return stripped !== undefined && this.redirectUris.some((allowed) => loopbackWithoutPort(allowed) === stripped);
  };
  const originalLogout = provider.Client.prototype.postLogoutRedirectUriAllowed;
  provider.Client.prototype.postLogoutRedirectUriAllowed = function postLogoutRedirectUriAllowed(value) {
    if (originalLogout.call(this, value)) return true;
    const stripped = loopbackWithoutPort(value);
    return stripped !== undefined && this.postLogoutRedirectUris.some((a) => loopbackWithoutPort(a) === stripped);
  };

  // RFC 8693 token exchange: a user's access token from this realm becomes an /mcp token of
  // tjwater-agent-mcp for the same subject. Every parameter the grant reads must be declared.
  provider.registerGrantType(
    TOKEN_EXCHANGE,
    async (ctx) => {
      const { client, params } = ctx.oidc;
      if (client.clientId !== 'tjwater-agent-mcp') {
        throw new errors.UnauthorizedClient('this client may not exchange tokens');
      }
      if (!params.subject_token || params.subject_token_type !== ACCESS_TOKEN_TYPE) {
        throw new errors.InvalidRequest('subject_token of type access_token is required');
      }
      if (params.requested_token_type && params.requested_token_type !== ACCESS_TOKEN_TYPE) {
        throw new errors.InvalidRequest('only access tokens can be requested');
      }
      let subject;
      try {
        ({ payload: subject } = await jwtVerify(params.subject_token, createLocalJWKSet(publicJwks()), {
          issuer,
          algorithms: ['RS256'],
          typ: 'JWT',
        }));
      } catch {
        throw new errors.InvalidGrant('subject_token is invalid');
      }
      const serviceAccount = SERVICE_ACCOUNTS.has(subject.sub) && subject.client_id === subject.sub;
      if (!USERS_BY_SUB[subject.sub] && !serviceAccount) {
        throw new errors.InvalidGrant('subject_token does not name a user or a service account');
      }

      // Default: the delegated scopes. A client may ask for the catalog scope as well (an SDK client
      // lists tools before it calls one, to validate the result against the tool's outputSchema).
      const requested = params.scope ? params.scope.split(' ') : EXCHANGED_SCOPES;
      const scope = requested.filter((s) => MCP_SCOPES.includes(s));
      const indicator = params.resource ?? (params.audience && params.audience !== AUDIENCE ? params.audience : MCP_RESOURCE);
      const token = new ctx.oidc.provider.AccessToken({
        accountId: subject.sub,
        client,
        gty: 'token-exchange',
        scope: scope.join(' '),
      });
      token.resourceServer = new ctx.oidc.provider.ResourceServer(indicator, resourceServerInfo(indicator, TOKEN_EXCHANGE));
      const value = await token.save();
      ctx.body = {
        access_token: value,
        issued_token_type: ACCESS_TOKEN_TYPE,
        token_type: 'Bearer',
        expires_in: token.expiration,
        scope: token.scope,
      };
    },
    ['subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'resource', 'scope'],
  );
  return provider;
}

async function logoutSource(ctx, form) {
  ctx.type = 'html';
  if (ctx.oidc.entities.IdTokenHint) {
    // The form carries the xsrf secret; logout=yes is the confirmation the hint stands for.
    const auto = form.replace('</form>', '<input type="hidden" name="logout" value="yes"></form>');
    ctx.body = page('Signing out', `${auto}<noscript><button type="submit" form="op.logoutForm">Sign out</button></noscript>`
      + '<script>document.getElementById("op.logoutForm").submit()</script>');
    return;
  }
  ctx.body = page(
    `Sign out of ${REALM}?`,
    `${form}<button id="kc-logout" type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>`
      + '<button type="submit" form="op.logoutForm">No, stay signed in</button>',
  );
}

// --- login form (the interaction) ---------------------------------------------------------------
function escapeHtml(value) {
  return String(value).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(title, body) {
  return `<!doctype html><html><head><meta charset="utf-8"><title>${escapeHtml(title)}</title></head>`
    + `<body><h1>${escapeHtml(title)}</h1>${body}</body></html>`;
}

function loginForm(uid, message) {
  return page(
    `Sign in to ${REALM}`,
    `${message ? `<p id="input-error">${escapeHtml(message)}</p>` : ''}`
      + `<form id="kc-form-login" method="post" action="${REALM_PATH}/login-actions/authenticate/${escapeHtml(uid)}">`
      + '<label>Username <input name="username" autocomplete="username"></label>'
      + '<label>Password <input name="password" type="password" autocomplete="current-password"></label>'
      + '<button type="submit" name="login">Sign in</button></form>',
  );
}

async function readForm(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 16384) throw new Error('form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function send(res, status, contentType, body) {
  res.writeHead(status, { 'content-type': contentType, 'cache-control': 'no-store' });
  res.end(body);
}

async function handleLogin(req, res) {
  const details = await current.interactionDetails(req, res);
  if (req.method === 'GET') {
    send(res, 200, 'text/html; charset=utf-8', loginForm(details.uid));
    return;
  }
  const form = await readForm(req);
  const user = USERS[form.get('username') ?? ''];
  const password = Buffer.from(form.get('password') ?? '');
  if (!user || password.length !== user.password.length || !crypto.timingSafeEqual(password, Buffer.from(user.password))) {
    send(res, 200, 'text/html; charset=utf-8', loginForm(details.uid, 'Invalid username or password.'));
    return;
  }
  await current.interactionFinished(req, res, { login: { accountId: user.sub } }, { mergeWithLastSubmission: false });
}

// --- admin (key rotation) -----------------------------------------------------------------------
function adminAllowed(req) {
  if (!ADMIN_SECRET) return false;
  const given = Buffer.from(req.headers.authorization ?? '');
  const expected = Buffer.from(`Bearer ${ADMIN_SECRET}`);
  return given.length === expected.length && crypto.timingSafeEqual(given, expected);
}

async function handleAdmin(req, res, url) {
  if (!adminAllowed(req)) {
    send(res, 404, 'application/json', JSON.stringify({ error: 'not_found' }));
    return;
  }
  if (req.method === 'POST' && url.pathname === '/admin/rotate') {
    const fresh = await newSigningKey();
    keys = url.searchParams.get('drop_old') === '1' ? [fresh] : [fresh, ...keys];
    current = buildProvider(issuer); // same issuer, same cookie keys, same (module-level) token store
    handler = current.callback();
    send(res, 200, 'application/json', JSON.stringify({ signing_kid: fresh.kid, kids: keys.map((k) => k.kid) }));
    return;
  }
  send(res, 404, 'application/json', JSON.stringify({ error: 'not_found' }));
}

// --- HTTP server --------------------------------------------------------------------------------
let issuer;
let current;
let handler;

const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, 'http://idp.invalid');
    if (url.pathname.startsWith('/admin/')) {
      await handleAdmin(req, res, url);
      return;
    }
    if (!url.pathname.startsWith(`${REALM_PATH}/`)) {
      send(res, 404, 'application/json', JSON.stringify({ error: 'not_found' }));
      return;
    }
    if (url.pathname.startsWith(`${REALM_PATH}/login-actions/authenticate/`)) {
      await handleLogin(req, res);
      return;
    }
    // Mount the provider under the realm path the way Express would (originalUrl + stripped url).
    req.originalUrl = req.url;
    req.url = req.url.slice(REALM_PATH.length);
    await handler(req, res);
  } catch (error) {
    if (!res.headersSent) {
      const status = error instanceof errors.OIDCProviderError ? error.statusCode : 500;
      send(res, status, 'text/html; charset=utf-8', page('Error', `<p>${escapeHtml(error.message)}</p>`));
    }
    if (!(error instanceof errors.OIDCProviderError)) console.error(error);
  }
});

server.listen(PORT, HOST, () => {
  const { port } = server.address();
  issuer = `http://${HOST}:${port}${REALM_PATH}`;
  current = buildProvider(issuer);
  handler = current.callback();
  process.stdout.write(`${JSON.stringify({ issuer, port, audience: AUDIENCE })}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
