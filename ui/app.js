// The dashboard: sign-in, then the overview, a namespace, or its entries, by the address's
// hash (#/, #/ns/NAME?range=24h, #/ns/NAME/entries, #/ns/NAME/entry/KEY), so the back
// button, bookmarks and a reload all work.

import { ApiError, caches, setToken, token } from './api.js';
import { h, say } from './dom.js';
import { entryDetail, entryBrowser } from './entries.js';
import { namespaceView } from './namespace.js';
import { overview } from './overview.js';

const page = document.getElementById('page');
const signIn = document.getElementById('sign-in');
const signOut = document.getElementById('sign-out');

function showSignIn(text) {
  setToken(null);
  page.hidden = true;
  page.replaceChildren();
  signIn.hidden = false;
  signOut.hidden = true;
  document.getElementById('crumbs').replaceChildren();
  say(text || '', text ? 'error' : 'info');
  document.getElementById('token').focus();
}

/** What went wrong, as the person can act on it; a token the service refuses signs out. */
export function failed(error) {
  if (error instanceof ApiError && error.status === 401) {
    showSignIn('This token is unknown, expired or revoked. Paste another.');
  } else if (error instanceof ApiError && error.status === 403) {
    say(`Not allowed with this token: ${error.message}`, 'error');
  } else {
    say(error.message || String(error), 'error');
  }
}

function crumbs(parts) {
  const nav = document.getElementById('crumbs');
  nav.replaceChildren(h('ol', {}, parts.map(([text, href]) => h('li', {}, href ? h('a', { href }, text) : text))));
}

async function route() {
  if (!token()) {
    showSignIn();
    return;
  }
  signIn.hidden = true;
  signOut.hidden = false;
  page.hidden = false;
  const [path, query] = location.hash.replace(/^#/, '').split('?');
  page.setAttribute('aria-busy', 'true');
  delete page.dataset.ready;
  say('');
  try {
    // Inside the try: an address with a malformed `%` is an error shown, not a blank page.
    const params = new URLSearchParams(query || '');
    const parts = (path || '/').split('/').filter(Boolean).map(decodeURIComponent);
    let view;
    if (parts[0] === 'ns' && parts[1] && parts[2] === 'entries') {
      crumbs([['Overview', '#/'], [parts[1], `#/ns/${encodeURIComponent(parts[1])}`], ['Entries']]);
      view = await entryBrowser(parts[1], params);
    } else if (parts[0] === 'ns' && parts[1] && parts[2] === 'entry' && parts[3]) {
      crumbs([['Overview', '#/'], [parts[1], `#/ns/${encodeURIComponent(parts[1])}`],
        ['Entries', `#/ns/${encodeURIComponent(parts[1])}/entries`], ['Entry']]);
      view = await entryDetail(parts[1], parts[3]);
    } else if (parts[0] === 'ns' && parts[1]) {
      crumbs([['Overview', '#/'], [parts[1]]]);
      view = await namespaceView(parts[1], params.get('range') || '24h');
    } else {
      crumbs([['Overview']]);
      view = await overview();
    }
    page.replaceChildren(view);
    const heading = page.querySelector('h1');
    if (heading) document.title = `${heading.textContent} · TeamCache`;
  } catch (error) {
    failed(error);
    page.replaceChildren();
  } finally {
    page.removeAttribute('aria-busy');
    page.dataset.ready = location.hash || '#/';
  }
}

document.getElementById('sign-in-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const field = document.getElementById('token');
  setToken(field.value.trim());
  field.value = '';
  try {
    await caches();
    location.hash = '#/';
    await route();
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) {
      showSignIn('This token may read no namespace. Paste one with read scope.');
    } else if (error instanceof ApiError && error.status === 401) {
      showSignIn('This token is unknown, expired or revoked. Paste another.');
    } else {
      showSignIn(error.message);
    }
  }
});

signOut.addEventListener('click', () => {
  showSignIn();
  history.replaceState(null, '', '#/');
});

window.addEventListener('hashchange', route);
route();
