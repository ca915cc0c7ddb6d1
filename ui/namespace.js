// One namespace: its totals, its history over 1 h / 24 h / 30 d, its bytes against its cap,
// evictions, and its most-hit entries.

import { api, mayAdminister, ns } from './api.js';
import { lines, stackedBars } from './charts.js';
import { h, table } from './dom.js';
import * as f from './format.js';

/** Each range: how far back, and at which step (a point a minute, an hour, a day). */
export const RANGES = {
  '1h': { label: '1 hour', seconds: 3600, step: 60 },
  '24h': { label: '24 hours', seconds: 86400, step: 3600 },
  '30d': { label: '30 days', seconds: 30 * 86400, step: 86400 },
};

function picker(name, current) {
  return h('nav', { class: 'ranges', 'aria-label': 'Time range' },
    Object.entries(RANGES).map(([key, range]) => h('a', {
      href: `#/ns/${encodeURIComponent(name)}?range=${key}`,
      'aria-current': key === current ? 'page' : null, class: 'range',
    }, range.label)));
}

function figure(label, value, exact) {
  return h('div', { class: 'figure' }, h('dt', {}, label), h('dd', { 'data-value': exact ?? value }, value));
}

function totals(stats, currency) {
  return h('dl', { class: 'figures', id: 'totals' },
    figure('Entries', f.count(stats.entries), stats.entries),
    figure('Stored', f.bytes(stats.bytes.stored), stats.bytes.stored),
    figure('Hit ratio', f.ratio(f.hitRatio(stats)), f.hitRatio(stats)),
    figure('Hits', f.count(stats.lookups.hit), stats.lookups.hit),
    figure('Waited for a fill', f.count(stats.lookups.collapsed), stats.lookups.collapsed),
    figure('Answered by client tiers', f.count(stats.lookups.local), stats.lookups.local),
    figure('Leases held now', f.count(stats.leases.held), stats.leases.held),
    figure('Misses', f.count(stats.lookups.miss), stats.lookups.miss),
    figure('Tokens saved', f.count(stats.tokens_saved.input + stats.tokens_saved.output),
      stats.tokens_saved.input + stats.tokens_saved.output),
    figure('Cost saved', f.money(stats.cost_saved, currency), stats.cost_saved),
    figure('Writes', f.count(stats.writes), stats.writes),
    figure('Evictions', f.count(stats.evictions), stats.evictions));
}

function charts(points, step, currency, limit) {
  const times = points.map((p) => p.t);
  const labels = times.map((t) => f.time(t, step));
  const pick = (get) => points.map(get);
  const total = (get) => pick(get).reduce((a, b) => a + b, 0);
  const lookups = total((p) => p.hits + p.misses);
  const ratio = pick((p) => (p.hits + p.misses === 0 ? null : p.hits / (p.hits + p.misses)));
  const common = { times, labels };
  const boxes = [
    lines({
      ...common, title: 'Hit ratio', format: f.ratio, top: 1,
      summary: `${f.ratio(lookups ? total((p) => p.hits) / lookups : null)} over the range.`,
      series: [{ name: 'hits / (hits + misses)', key: 'hit_ratio', className: 's-hit', values: ratio }],
    }),
    stackedBars({
      ...common, title: 'Requests by outcome', format: f.count,
      summary: `${f.count(total((p) => p.hits + p.misses + p.stale + p.bypass))} lookups.`,
      series: [
        // A hit is counted once: as collapsed (it waited for a fill), as local (a client's tier
        // answered it and reported it), or as a plain hit; the three add up to `hits`.
        { name: 'hit', key: 'hit', className: 's-hit', values: pick((p) => p.hits - p.collapsed - p.local) },
        { name: 'waited for a fill', key: 'collapsed', className: 's-collapsed', values: pick((p) => p.collapsed) },
        { name: 'answered by a client tier', key: 'local', className: 's-local', values: pick((p) => p.local) },
        { name: 'stale', key: 'stale', className: 's-stale', values: pick((p) => p.stale) },
        { name: 'miss', key: 'miss', className: 's-miss', values: pick((p) => p.misses) },
        { name: 'bypass', key: 'bypass', className: 's-bypass', values: pick((p) => p.bypass) },
      ],
    }),
    stackedBars({
      ...common, title: 'Tokens saved', format: f.count,
      summary: `${f.count(total((p) => p.tokens_saved.input + p.tokens_saved.output))} tokens.`,
      series: [
        { name: 'input', key: 'input', className: 's-input', values: pick((p) => p.tokens_saved.input) },
        { name: 'output', key: 'output', className: 's-output', values: pick((p) => p.tokens_saved.output) },
      ],
    }),
    stackedBars({
      ...common, title: `Cost saved (${currency})`, format: (v) => f.money(v, currency), axisFormat: f.short,
      summary: `${f.money(total((p) => p.cost_saved), currency)} saved.`,
      series: [{ name: 'cost saved', key: 'cost', className: 's-cost', values: pick((p) => p.cost_saved) }],
    }),
    lines({
      ...common, title: 'Stored bytes', format: f.bytes,
      summary: `${f.bytes(points.at(-1)?.bytes ?? 0)} now${limit ? `, cap ${f.bytes(limit)}` : ''}.`,
      top: limit ? Math.max(limit, ...pick((p) => p.bytes)) : undefined,
      series: [{ name: 'stored', key: 'bytes', className: 's-bytes', values: pick((p) => p.bytes) }]
        .concat(limit ? [{ name: 'cap', key: 'cap', className: 's-cap', values: pick(() => limit) }] : []),
    }),
    stackedBars({
      ...common, title: 'Evictions by reason', format: f.count,
      summary: `${f.count(total((p) => p.evictions))} evictions.`,
      series: ['expired', 'idle', 'size', 'manual'].map((reason) => ({
        name: reason, key: reason, className: `s-${reason}`, values: pick((p) => p.evictions_by_reason[reason]),
      })),
    }),
  ];
  return h('div', { class: 'charts' }, boxes);
}

function topEntries(name, top) {
  if (top.length === 0) return h('p', {}, 'No entry has been hit yet.');
  return table('The 20 most-hit entries', ['Key', 'Model', 'Hits', 'Last access'], top.map((entry) => [
    h('a', { href: `#/ns/${encodeURIComponent(name)}/entry/${encodeURIComponent(entry.key_path)}` }, entry.key),
    entry.model ?? '–',
    h('span', { 'data-value': entry.hit_count }, f.count(entry.hit_count)),
    f.ago(entry.last_accessed_at),
  ]), { id: 'top-entries' });
}

export async function namespaceView(name, rangeKey) {
  const range = RANGES[rangeKey] ? rangeKey : '24h';
  const { seconds, step } = RANGES[range];
  // The range's points end with the current one: since is one step less than the range back
  // (else the history, floored to the step, gives 25 hours for "24 hours", as the overview's do not).
  const since = Math.floor(Date.now() / 1000) - seconds + step;
  // The cap is in the settings, which only an admin may read: others are not sent to be refused.
  const admin = await mayAdminister();
  const [stats, history, settings] = await Promise.all([
    api(`${ns(name)}/stats?top=20`),
    api(`${ns(name)}/stats/history?step=${step}&since=${since}`),
    admin ? api(`${ns(name)}/settings`).catch(() => null) : null,
  ]);
  const limit = settings?.max_bytes ?? null;
  return h('div', {},
    h('h1', {}, name),
    h('p', {}, h('a', { href: `#/ns/${encodeURIComponent(name)}/entries`, class: 'button' }, 'Browse entries')),
    totals(stats, history.currency),
    h('h2', {}, 'Over time'),
    picker(name, range),
    h('p', { class: 'hint' }, `From ${history.since} to ${history.until}, a point every ${f.duration(history.step)}.`
      + (limit ? ` Cap: ${f.bytes(limit)}.` : '')),
    charts(history.points, history.step, history.currency, limit),
    h('h2', {}, 'Most-hit entries'),
    topEntries(name, stats.top));
}
