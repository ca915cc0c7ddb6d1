// Every namespace the token may read: totals, savings over 24 hours and 30 days, bytes
// against the cap (when the token may read the settings).

import { api, caches as listCaches, mayAdminister, ns } from './api.js';
import { h, table } from './dom.js';
import * as f from './format.js';

/** Namespaces whose 24 h / 30 d figures are fetched (two small history requests each). */
const DETAILED = 100;

/**
 * Tokens and cost saved over the last 24 hours (24 hour points, this one included) and the
 * last 30 days (30 day points): two small answers, not 720 hour points a namespace.
 */
async function savings(name) {
  const now = Math.floor(Date.now() / 1000);
  const [hours, days] = await Promise.all([
    api(`${ns(name)}/stats/history?step=3600&since=${now - 23 * 3600}`),
    api(`${ns(name)}/stats/history?step=86400&since=${now - 29 * 86400}`),
  ]);
  const sum = (points, pick) => points.reduce((total, p) => total + pick(p), 0);
  const tokens = (p) => p.tokens_saved.input + p.tokens_saved.output;
  return {
    currency: hours.currency,
    tokensDay: sum(hours.points, tokens), tokensMonth: sum(days.points, tokens),
    costDay: sum(hours.points, (p) => p.cost_saved), costMonth: sum(days.points, (p) => p.cost_saved),
  };
}

async function cap(name) {
  try {
    return (await api(`${ns(name)}/settings`)).max_bytes;
  } catch {
    return undefined; // not an admin of it: the cap is not this token's to read
  }
}

/** Runs `work` over `items`, `width` at a time. */
async function pooled(items, width, work) {
  const results = new Array(items.length);
  let next = 0;
  async function lane() {
    while (next < items.length) {
      const index = next;
      next += 1;
      results[index] = await work(items[index]).catch(() => undefined);
    }
  }
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, lane));
  return results;
}

export async function overview() {
  const { caches, truncated } = await listCaches();
  const detailed = caches.slice(0, DETAILED);
  const admin = await mayAdminister();
  const [saved, caps] = await Promise.all([
    pooled(detailed, 4, (c) => savings(c.namespace)),
    admin ? pooled(detailed, 4, (c) => cap(c.namespace)) : [],
  ]);
  const rows = caches.map((c, i) => {
    const s = saved[i];
    const limit = caps[i];
    const stored = c.bytes.stored;
    return [
      h('a', { href: `#/ns/${encodeURIComponent(c.namespace)}` }, c.namespace),
      h('span', { 'data-value': c.entries }, f.count(c.entries)),
      h('span', { 'data-value': f.hitRatio(c) }, f.ratio(f.hitRatio(c))),
      s ? h('span', { 'data-value': s.tokensDay }, f.count(s.tokensDay)) : '–',
      s ? h('span', { 'data-value': s.tokensMonth }, f.count(s.tokensMonth)) : '–',
      s ? h('span', { 'data-value': s.costDay }, f.money(s.costDay, s.currency)) : '–',
      s ? h('span', { 'data-value': s.costMonth }, f.money(s.costMonth, s.currency)) : '–',
      h('span', { 'data-value': stored },
        limit ? [f.bytes(stored), ' of ', f.bytes(limit), ' ',
          h('meter', { min: 0, max: limit, value: stored, high: limit * 0.9, 'aria-label': 'share of the cap used' })]
          : f.bytes(stored)),
    ];
  });
  return h('div', {},
    h('h1', {}, 'Overview'),
    caches.length === 0 ? h('p', {}, 'This token may read namespaces, but none holds anything yet.') : null,
    table('Namespaces this token may read', ['Namespace', 'Entries', 'Hit ratio', 'Tokens saved 24 h',
      'Tokens saved 30 d', 'Cost saved 24 h', 'Cost saved 30 d', 'Stored'], rows, { id: 'namespaces' }),
    truncated ? h('p', { class: 'hint' }, 'More namespaces exist than are listed (10,000 shown).') : null,
    caches.length > DETAILED ? h('p', { class: 'hint' }, `Savings are shown for the first ${DETAILED}.`) : null);
}
