// A customer orders, sees the payment instructions, presses "I paid"; the operator signs in and
// confirms; the customer sees the new status. Screenshots of each step in $SCREENSHOTS.
import { chromium } from 'playwright-core';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const base = process.env.DESK_URL;
const shots = process.env.SCREENSHOTS;
const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

// Each person has a browser profile of their own (fresh --user-data-dir), so cookies never mix.
async function browser(name) {
  return chromium.launchPersistentContext(mkdtempSync(join(process.env.PROFILE_DIR, `${name}-`)), {
    executablePath: '/usr/bin/chromium', headless: true, args,
  });
}
async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

const customer = await browser('customer');
const operator = await browser('operator');
try {
  const c = customer.pages()[0] ?? await customer.newPage();
  c.setDefaultTimeout(10000);
  await c.goto(`${base}/`);
  await c.click('a[href="/gpu/h100-pcie-80gb"]');
  assert.match(await c.textContent('h1'), /H100 PCIe/);
  assert.match(await c.textContent('#price'), /60\.00 USD per GPU-day/);
  await shot(c, '01-product-sheet');
  await c.click('#order-link');
  assert.equal(await c.inputValue('#gpu'), 'h100-pcie-80gb');
  // A wrong email first: the message appears beside the field, the other values stay.
  await c.selectOption('#days', '7');
  await c.fill('#quantity', '2');
  await c.fill('#environment', 'CUDA 12.4, PyTorch 2.5');
  await c.fill('#email', 'not-an-email');
  await c.selectOption('#network', 'USDT-TRON');
  await c.click('#submit-order');
  assert.match(await c.textContent('#error-email'), /exactly one @/);
  assert.equal(await c.inputValue('#environment'), 'CUDA 12.4, PyTorch 2.5');
  await shot(c, '02-form-error');
  await c.fill('#email', 'browser.customer@example.com');
  await c.click('#submit-order');
  await c.waitForURL(/\/o\/[A-Za-z0-9_-]{43}$/);
  const orderUrl = c.url();
  const reference = (await c.textContent('#reference')).trim();
  assert.equal((await c.textContent('#state')).trim(), 'awaiting_payment');
  // 60 USD x 7 days x 2 GPUs = 840 USDT = 840,000,000 smallest units.
  assert.equal((await c.textContent('#amount')).trim(), '840.000000 USDT');
  assert.match(await c.textContent('#address'), /^T/);
  assert.ok(await c.isVisible('#example-address'));
  await shot(c, '03-payment-instructions');
  await c.fill('#tx_id', 'abc123');
  await c.click('#i-paid');
  await c.waitForURL(/\?paid=1$/);
  assert.equal((await c.textContent('#state')).trim(), 'payment_reported');
  assert.ok(await c.isVisible('#reported'));
  await shot(c, '04-i-paid');

  const o = operator.pages()[0] ?? await operator.newPage();
  o.setDefaultTimeout(10000);
  await o.goto(`${base}/operator`);
  await o.waitForURL(/\/operator\/login$/);
  await o.fill('#password', process.env.DESK_PASSWORD);
  await o.click('#sign-in');
  await o.waitForURL(/\/operator$/);
  await o.click(`a[href="/operator/orders/${reference}"]`);
  assert.equal(await o.textContent('#tx-id'), 'abc123');
  assert.equal((await o.textContent('#state')).trim(), 'payment_reported');
  await shot(o, '05-operator-order');
  await o.click('#move-paid');
  await o.waitForURL(/moved=paid$/);
  assert.equal((await o.textContent('#state')).trim(), 'paid');
  await shot(o, '06-operator-confirmed');

  await c.goto(orderUrl);
  assert.equal((await c.textContent('#state')).trim(), 'paid');
  await shot(c, '07-customer-sees-paid');
  // Another person's browser cannot see the operator's pages.
  const stranger = await customer.newPage();
  await stranger.goto(`${base}/operator/orders/${reference}`);
  assert.match(stranger.url(), /\/operator\/login$/);
  console.log(`browser test: order ${reference} ordered, reported paid, confirmed by the operator; screenshots in ${shots}`);
} catch (e) {
  for (const [who, ctx] of [['customer', customer], ['operator', operator]]) {
    for (const [i, p] of ctx.pages().entries()) {
      console.error(`${who} page ${i} at ${p.url()}: ${(await p.textContent('main').catch(() => '')).slice(0, 400)}`);
      await p.screenshot({ path: join(shots, `failed-${who}-${i}.png`) }).catch(() => {});
    }
  }
  throw e;
} finally {
  await customer.close();
  await operator.close();
}
