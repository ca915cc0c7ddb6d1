// The entry browser: find entries by key prefix, tag or model; see one (its description
// and a preview of its body, JSON pretty-printed); with write scope, delete it or evict its
// tag, after a confirmation. Looking never counts as a hit.

import { api, ApiError, ns } from './api.js';
import { confirmAction, h, say, table } from './dom.js';
import * as f from './format.js';

function entryLink(name, entry) {
  return h('a', { href: `#/ns/${encodeURIComponent(name)}/entry/${encodeURIComponent(entry.key_path)}` }, entry.key);
}

function searchForm(name, params) {
  const field = (id, label, hint) => h('div', { class: 'field' },
    h('label', { for: id }, label),
    h('input', { id, name: id, value: params.get(id) || '', autocomplete: 'off', 'aria-describedby': `${id}-hint` }),
    h('p', { class: 'hint', id: `${id}-hint` }, hint));
  return h('form', {
    class: 'search', role: 'search',
    onsubmit: (event) => {
      event.preventDefault();
      const query = new URLSearchParams();
      for (const key of ['prefix', 'tag', 'model']) {
        const value = event.target.elements[key].value.trim();
        if (value) query.set(key, value);
      }
      location.hash = `#/ns/${encodeURIComponent(name)}/entries?${encode(query)}`;
    },
  },
  field('prefix', 'Key prefix', 'Keys that start with this.'),
  field('tag', 'Tag', 'Entries carrying this tag.'),
  field('model', 'Model', 'Entries of this model, exactly.'),
  h('button', { type: 'submit' }, 'Find'));
}

function rows(name, entries) {
  return entries.map((entry) => [
    entryLink(name, entry),
    entry.model ?? '–',
    entry.tags.join(', ') || '–',
    h('span', { 'data-value': entry.bytes.identity }, f.bytes(entry.bytes.identity)),
    h('span', { 'data-value': entry.hit_count }, f.count(entry.hit_count)),
    f.ago(entry.last_accessed_at),
    entry.ttl >= 0 ? f.duration(entry.ttl) : `expired ${f.duration(-entry.ttl)} ago`,
  ]);
}

/**
 * A query string the server reads as written: URLSearchParams writes a space as `+`, which
 * a query's RFC 3986 reading (the server's) takes as a plus sign.
 */
function encode(query) {
  return [...query].map(([key, value]) => `${encodeURIComponent(key)}=${encodeURIComponent(value)}`).join('&');
}

export async function entryBrowser(name, params) {
  const query = new URLSearchParams();
  for (const key of ['prefix', 'tag', 'model']) if (params.get(key)) query.set(key, params.get(key));
  query.set('limit', '50');
  const first = await api(`${ns(name)}/entries?${encode(query)}`);
  const headers = ['Key', 'Model', 'Tags', 'Size', 'Hits', 'Last access', 'Fresh for'];
  const results = table(`Entries of ${name}`, headers, rows(name, first.entries), { id: 'entries' });
  const body = results.querySelector('tbody');
  let next = first.next;
  const more = h('button', {
    type: 'button', hidden: !next,
    onclick: async () => {
      query.set('after', next);
      try {
        const page = await api(`${ns(name)}/entries?${encode(query)}`);
        for (const cells of rows(name, page.entries)) {
          body.append(h('tr', {}, cells.map((cell, i) => (i === 0 ? h('th', { scope: 'row' }, cell) : h('td', {}, cell)))));
        }
        next = page.next;
        more.hidden = !next;
      } catch (error) {
        say(error.message, 'error');
      }
    },
  }, 'More');
  // A page reads a bounded run of keys: with a tag or model it may come back short, even
  // empty, and still have more to search.
  let status = null;
  if (first.entries.length === 0) {
    status = h('p', { id: 'no-entries' }, first.next
      ? 'No match among the first keys searched. "More" searches on.' : 'No entry matches.');
  }
  return h('div', {},
    h('h1', {}, `Entries of ${name}`),
    searchForm(name, params),
    status,
    first.entries.length > 0 || first.next ? results : null,
    more);
}

function preview(entry) {
  const { body } = entry;
  if (body.kind === 'binary') {
    return h('div', {}, h('p', {}, `Binary, ${f.bytes(body.bytes)}; the first bytes in base64:`),
      h('pre', { class: 'body' }, body.base64));
  }
  let text = body.text;
  let kind = 'text';
  if (!body.truncated) {
    try {
      text = JSON.stringify(JSON.parse(body.text), null, 2);
      kind = 'JSON';
    } catch {
      // Not JSON: shown as it is.
    }
  }
  return h('div', {},
    h('p', {}, `${kind}, ${f.bytes(body.bytes)}${body.truncated ? ' (the first 64 KiB shown)' : ''}:`),
    h('pre', { class: 'body', id: 'entry-body', tabindex: '0' }, text));
}

async function remove(name, entry) {
  if (!(await confirmAction(`Delete the entry "${entry.key}" from ${name}? This cannot be undone.`, 'Delete'))) return;
  try {
    await api(`${ns(name)}/entries/${entry.key_path}`, { method: 'DELETE' });
    say(`Deleted "${entry.key}".`);
    location.hash = `#/ns/${encodeURIComponent(name)}/entries`;
  } catch (error) {
    say(error instanceof ApiError && error.status === 403
      ? 'This token may not write to this namespace: nothing was deleted.' : error.message, 'error');
  }
}

async function evictTag(name, tag) {
  if (!(await confirmAction(`Evict every entry of ${name} tagged "${tag}"?`, 'Evict'))) return;
  try {
    const result = await api(`${ns(name)}/evict`, { method: 'POST', body: { tag } });
    say(`Evicted ${f.count(result.evicted ?? result.entries ?? 0)} entries tagged "${tag}".`);
    location.hash = `#/ns/${encodeURIComponent(name)}/entries`;
  } catch (error) {
    say(error instanceof ApiError && error.status === 403
      ? 'This token may not write to this namespace: nothing was evicted.' : error.message, 'error');
  }
}

export async function entryDetail(name, keyPath) {
  const entry = await api(`${ns(name)}/inspect/${keyPath}`);
  const item = (label, value) => [h('dt', {}, label), h('dd', {}, value)];
  return h('div', {},
    h('h1', {}, entry.key),
    h('dl', { class: 'details', id: 'entry-details' },
      item('Model', entry.model ?? '–'),
      item('Tags', entry.tags.join(', ') || '–'),
      item('Content type', entry.content_type),
      item('Size', `${f.bytes(entry.bytes.identity)} (${f.bytes(entry.bytes.stored)} stored)`),
      item('Hits', h('span', { 'data-value': entry.hit_count }, f.count(entry.hit_count))),
      item('Last access', f.ago(entry.last_accessed_at)),
      item('Written', entry.updated_at),
      item('Expires', `${entry.expires_at} (${entry.ttl >= 0 ? `in ${f.duration(entry.ttl)}` : 'expired'})`),
      item('Tokens', `${f.count(entry.tokens.input)} in, ${f.count(entry.tokens.output)} out`),
      item('ETag', entry.etag)),
    entry.metadata ? [h('h2', {}, 'Metadata'), h('pre', { class: 'body' }, JSON.stringify(entry.metadata, null, 2))] : null,
    h('h2', {}, 'Body'),
    preview(entry),
    h('h2', {}, 'Actions'),
    h('p', { class: 'hint' }, 'These need write scope on the namespace.'),
    h('div', { class: 'actions' },
      h('button', { type: 'button', class: 'danger', id: 'delete-entry', onclick: () => remove(name, entry) },
        'Delete this entry'),
      entry.tags.map((tag) => h('button', { type: 'button', onclick: () => evictTag(name, tag) },
        `Evict tag "${tag}"`))));
}
