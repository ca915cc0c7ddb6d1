// Building the page from data without HTML strings: every text from the API (keys, models,
// tags, bodies) goes in as a text node, so nothing it holds can become markup or script.

export function h(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** A table with a caption, column headers and rows of cells (text or nodes). */
export function table(caption, headers, rows, attributes = {}) {
  return h('div', { class: 'table-wrap' },
    h('table', attributes,
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, headers.map((text) => h('th', { scope: 'col' }, text)))),
      h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((cell, i) => (i === 0
        ? h('th', { scope: 'row' }, cell) : h('td', {}, cell))))))));
}

export function say(text, kind = 'info') {
  const message = document.getElementById('message');
  message.textContent = text;
  message.className = text ? kind : '';
}

/** Asks in the page's dialog; resolves true when the person confirms. */
export function confirmAction(text, action) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = action;
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
  });
}
