// Charts drawn by hand in SVG: no library, no build step. Every bar and point carries its
// series, time and exact value (data-series, data-t, data-value) and a <title> a screen
// reader and a pointer can read; each chart has a caption and a summary as its label.

const SVG = 'http://www.w3.org/2000/svg';
const WIDTH = 640;
const HEIGHT = 220;
const PAD = { top: 12, right: 12, bottom: 28, left: 64 };

function el(name, attributes = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function figure(title, summary) {
  const box = document.createElement('figure');
  box.className = 'chart';
  const caption = document.createElement('figcaption');
  caption.textContent = title;
  box.append(caption);
  const svg = el('svg', { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img', 'aria-label': `${title}. ${summary}` });
  box.append(svg);
  return { box, svg };
}

function legend(box, series) {
  const list = document.createElement('ul');
  list.className = 'legend';
  for (const item of series) {
    const entry = document.createElement('li');
    const swatch = document.createElement('span');
    swatch.className = `swatch ${item.className}`;
    swatch.setAttribute('aria-hidden', 'true');
    entry.append(swatch, document.createTextNode(item.name));
    list.append(entry);
  }
  box.append(list);
}

/** Gridlines and labels for 0..top; x labels at the first, middle and last point. */
function axes(svg, { top, divisions }, format, labels) {
  const plotHeight = HEIGHT - PAD.top - PAD.bottom;
  for (let i = 0; i <= divisions; i += 1) {
    const value = (top * i) / divisions;
    const y = PAD.top + plotHeight - (plotHeight * i) / divisions;
    svg.append(el('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: y, y2: y, class: 'grid' }));
    svg.append(el('text', { x: PAD.left - 6, y: y + 4, class: 'axis', 'text-anchor': 'end' }, format(value)));
  }
  const plotWidth = WIDTH - PAD.left - PAD.right;
  const n = labels.length;
  const shown = [...new Set([0, Math.floor((n - 1) / 2), n - 1])].filter((index) => index >= 0);
  for (const index of shown) {
    const x = PAD.left + (plotWidth * (index + 0.5)) / n;
    // The ends are anchored inward, so no label runs past the chart's edge.
    const anchor = n > 1 && index === 0 ? 'start' : n > 1 && index === n - 1 ? 'end' : 'middle';
    svg.append(el('text', { x, y: HEIGHT - 8, class: 'axis', 'text-anchor': anchor }, labels[index]));
  }
}

/** A top a little above `max` whose gridlines fall on round numbers: { top, divisions }. */
function scale(max) {
  if (max <= 0) return { top: 1, divisions: 4 };
  const magnitude = 10 ** Math.floor(Math.log10(max));
  for (const [step, divisions] of [[1, 5], [2, 4], [2.5, 5], [5, 5], [10, 5]]) {
    if (step * magnitude >= max) return { top: step * magnitude, divisions };
  }
  return { top: 10 * magnitude, divisions: 5 };
}

/**
 * Stacked bars: one bar a point, one segment a series.
 * series: [{ name, key, className, values: [number] }], times: [iso], labels: [text].
 */
export function stackedBars({ title, series, times, labels, format, axisFormat, summary }) {
  const { box, svg } = figure(title, summary);
  const totals = times.map((_, i) => series.reduce((sum, s) => sum + s.values[i], 0));
  const range = scale(Math.max(0, ...totals));
  const { top } = range;
  axes(svg, range, axisFormat ?? format, labels);
  const plotWidth = WIDTH - PAD.left - PAD.right;
  const plotHeight = HEIGHT - PAD.top - PAD.bottom;
  const slot = plotWidth / Math.max(times.length, 1);
  const barWidth = Math.max(1, slot * 0.8);
  times.forEach((t, i) => {
    let base = 0;
    for (const s of series) {
      const value = s.values[i];
      const height = (plotHeight * value) / top;
      const y = PAD.top + plotHeight - (plotHeight * base) / top - height;
      const rect = el('rect', {
        x: PAD.left + slot * i + (slot - barWidth) / 2, y, width: barWidth, height,
        class: `bar ${s.className}`, 'data-series': s.key, 'data-t': t, 'data-value': value,
      });
      rect.append(el('title', {}, `${labels[i]}: ${s.name} ${format(value)}`));
      svg.append(rect);
      base += value;
    }
  });
  legend(box, series);
  return box;
}

/** Lines: null values leave a gap. Same arguments as stackedBars, plus an optional fixed top. */
export function lines({ title, series, times, labels, format, axisFormat, summary, top: fixedTop }) {
  const { box, svg } = figure(title, summary);
  const values = series.flatMap((s) => s.values.filter((v) => v !== null));
  const range = fixedTop ? { top: fixedTop, divisions: 4 } : scale(Math.max(0, ...values));
  const { top } = range;
  axes(svg, range, axisFormat ?? format, labels);
  const plotWidth = WIDTH - PAD.left - PAD.right;
  const plotHeight = HEIGHT - PAD.top - PAD.bottom;
  const slot = plotWidth / Math.max(times.length, 1);
  for (const s of series) {
    let path = '';
    let pen = 'M';
    s.values.forEach((value, i) => {
      if (value === null) {
        pen = 'M';
        return;
      }
      const x = PAD.left + slot * (i + 0.5);
      const y = PAD.top + plotHeight - (plotHeight * Math.min(value, top)) / top;
      path += `${pen}${x.toFixed(1)},${y.toFixed(1)} `;
      pen = 'L';
      const dot = el('circle', {
        cx: x, cy: y, r: times.length > 90 ? 1.5 : 3, class: `dot ${s.className}`,
        'data-series': s.key, 'data-t': times[i], 'data-value': value,
      });
      dot.append(el('title', {}, `${labels[i]}: ${s.name} ${format(value)}`));
      svg.append(dot);
    });
    svg.insertBefore(el('path', { d: path.trim(), class: `line ${s.className}`, 'data-series': s.key }), svg.firstChild);
  }
  legend(box, series);
  return box;
}
