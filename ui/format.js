// Numbers as people read them. Every figure keeps its exact value in the DOM (data-value),
// so what a chart shows can be checked against what the API said.

const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function bytes(value) {
  let amount = value;
  let unit = 0;
  while (Math.abs(amount) >= 1024 && unit < units.length - 1) {
    amount /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? Math.round(amount) : amount.toFixed(1)} ${units[unit]}`;
}

export function count(value) {
  return new Intl.NumberFormat('en').format(value);
}

export function ratio(value) {
  return value === null || value === undefined ? '–' : `${(value * 100).toFixed(1)} %`;
}

// A namespace's hit ratio, or null when nothing was looked up: the service reads 0 then, which
// would show an idle namespace as a cache that misses everything (its chart shows '–').
export function hitRatio(stats) {
  return stats.lookups.hit + stats.lookups.miss === 0 ? null : stats.hit_ratio;
}

export function money(value, currency) {
  const digits = value !== 0 && Math.abs(value) < 0.01 ? 6 : 2;
  return `${value.toFixed(digits)} ${currency}`;
}

export function time(iso, step) {
  const date = new Date(iso);
  if (step >= 86400) return date.toISOString().slice(0, 10);
  return `${date.toISOString().slice(5, 10)} ${date.toISOString().slice(11, 16)}Z`;
}

export function ago(iso) {
  if (!iso) return 'never';
  const seconds = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  return duration(seconds) + ' ago';
}

export function duration(seconds) {
  const abs = Math.abs(seconds);
  if (abs < 120) return `${seconds} s`;
  if (abs < 7200) return `${Math.round(seconds / 60)} min`;
  if (abs < 172800) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

/** A short number for an axis: no currency, at most three significant digits. */
export function short(value) {
  if (value === 0) return '0';
  return Number(value.toPrecision(3)).toString();
}
