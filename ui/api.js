// The API as the dashboard reads it: same origin, the pasted token as a bearer token, no
// cookies. The token lives in this tab's sessionStorage only.

const TOKEN_KEY = 'teamcache.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** A refused or failed call, with the problem's status and detail. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

/** How long one call may take, answer included: a TeamCache that stopped answering is said
 * to be so, rather than leaving the page waiting forever. */
export const TIMEOUT_MS = 8000;

/** Calls the API; resolves to the JSON answer (null for 204), rejects with an ApiError. */
export async function api(path, { method = 'GET', body } = {}) {
  const headers = { Authorization: `Bearer ${token()}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const deadline = AbortSignal.timeout(TIMEOUT_MS);
  let response;
  let data = null;
  const late = `TeamCache did not answer within ${TIMEOUT_MS / 1000} s. Try again shortly.`;
  try {
    response = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit', cache: 'no-store', signal: deadline,
    });
  } catch {
    throw new ApiError(0, deadline.aborted ? late : 'TeamCache could not be reached. Is it running?');
  }
  const type = response.headers.get('Content-Type') || '';
  try {
    if (response.status !== 204 && type.includes('json')) data = await response.json();
  } catch {
    throw new ApiError(0, deadline.aborted ? late : `TeamCache's answer (HTTP ${response.status}) could not be read.`);
  }
  if (!response.ok) {
    throw new ApiError(response.status, (data && (data.detail || data.title)) || `HTTP ${response.status}`);
  }
  return data;
}

export function ns(name) {
  return `/v1/caches/${encodeURIComponent(name)}`;
}

let grants = null;

/** The token's scopes and namespace pattern, as GET /v1/caches said (null: not known yet, or auth off). */
export function scopes() {
  return grants;
}

/** GET /v1/caches, remembering what the token may do. */
export async function caches() {
  const answer = await api('/v1/caches');
  grants = answer.token;
  return answer;
}

/** Whether the token may administer (read the settings of) namespaces: with auth off, yes. */
export async function mayAdminister() {
  if (grants === null) await caches().catch(() => undefined);
  return grants === null || grants.scopes.includes('admin');
}
