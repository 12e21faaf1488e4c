// The desk's pages: catalogue, product sheet, order form, order status with payment instructions,
// operator sign-in, order list and order detail.
#include "pages.hpp"

#include <fmt/format.h>

#include "itera/desk/lifecycle.hpp"
#include "itera/env/catalogue.hpp"
#include "src/report/text_format.hpp"

namespace itera::desk::pages {

namespace {

std::string layout(std::string_view title, const std::string& body, bool operator_nav = false) {
  std::string out;
  out.reserve(body.size() + 1024);
  out += "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
         "<meta name=\"referrer\" content=\"same-origin\"><title>";
  out += html(title);
  out += " - itera desk</title><link rel=\"stylesheet\" href=\"/static/desk.css\"></head><body>"
         "<header><a class=\"brand\" href=\"/\">itera desk</a><nav><a href=\"/\">GPUs</a><a href=\"/order\">Order</a>";
  if (operator_nav) out += "<a href=\"/operator\">Orders</a>";
  out += "</nav></header><main>";
  out += body;
  out += "</main><footer>We store what an order needs and nothing else: no files, prompts or computations of "
         "yours are ever inspected. Contact details are erased after the order closes (see the privacy note on each "
         "product sheet).</footer></body></html>\n";
  return out;
}

std::string price_line(const desk_service& desk, const std::string& id) {
  const auto p = desk.prices().price(id);
  if (!p) return "not offered at the moment";
  return fmt::format("{} USD per GPU-day", format_usd_cents(*p));
}

std::string example_prices_banner(const desk_service& desk) {
  if (!desk.prices().example) return {};
  return fmt::format("<p class=\"warn\" id=\"example-prices\">Example prices (dated {}), for trying the desk: not an offer.</p>",
                     html(desk.prices().dated));
}

std::string field_error(const field_errors& errors, const std::string& field) {
  const auto it = errors.find(field);
  if (it == errors.end()) return {};
  return fmt::format("<span class=\"error\" id=\"error-{}\" role=\"alert\">{}</span>", field, html(it->second));
}

std::string state_badge(order_state s) {
  return fmt::format("<span class=\"state state-{0}\" id=\"state\">{0}</span>", to_string(s));
}

std::string history_table(const std::vector<transition_record>& history) {
  std::string out = "<table class=\"history\"><thead><tr><th>when</th><th>from</th><th>to</th><th>by</th><th>note</th></tr></thead><tbody>";
  for (const auto& t : history) {
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", html(format_time_utc(t.at_ms)),
                       html(t.from_state.empty() ? "-" : t.from_state), html(t.to_state), html(t.actor), html(t.note));
  }
  out += "</tbody></table>";
  return out;
}

std::string gpu_name(const desk_service& desk, const std::string& id) {
  const auto* c = desk.cards().find(id);
  return c ? c->name : id;
}

}  // namespace

std::string html(std::string_view s) { return report::html_escape(s); }

std::string mask_email(std::string_view email) {
  const auto at = email.find('@');
  if (email.empty() || at == std::string_view::npos || at == 0) return email.empty() ? "(erased)" : "***";
  return std::string(email.substr(0, 1)) + "***" + std::string(email.substr(at));
}

const char* const stylesheet = R"css(
body{font-family:system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9;line-height:1.45}
header{display:flex;gap:2rem;align-items:center;padding:.8rem 2rem;background:#15202b;color:#fff}
header a{color:#fff;text-decoration:none;margin-right:1rem}.brand{font-weight:700}
main{max-width:60rem;margin:1.5rem auto;padding:0 1rem}
footer{max-width:60rem;margin:2rem auto;padding:0 1rem;color:#59636e;font-size:.85rem}
table{border-collapse:collapse;width:100%;background:#fff;margin:.5rem 0 1rem}
th,td{border:1px solid #d0d7de;padding:.35rem .6rem;text-align:left;vertical-align:top}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(16rem,1fr));gap:1rem}
.card{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:1rem}
form.order label{display:block;margin-top:.8rem;font-weight:600}
input,select{font:inherit;padding:.3rem;min-width:18rem}
button{font:inherit;padding:.4rem 1rem;margin-top:1rem;cursor:pointer}
.error{color:#b3261e;margin-left:.6rem;font-weight:400}
.warn{background:#fff4ce;border:1px solid #e3b341;padding:.5rem .8rem}
.notice{background:#dff6dd;border:1px solid #56a14f;padding:.5rem .8rem}
.pay{background:#fff;border:2px solid #15202b;padding:1rem;border-radius:6px}
.amount{font-size:1.4rem;font-weight:700;font-family:ui-monospace,monospace}
code,.mono{font-family:ui-monospace,monospace;word-break:break-all}
.state{padding:.1rem .5rem;border-radius:4px;background:#e7ecf0;font-family:ui-monospace,monospace}
.state-paid,.state-active,.state-provisioning{background:#dff6dd}.state-rejected,.state-expired{background:#ffe2e0}
form.inline{display:inline-block;margin-right:.5rem}
)css";

std::string catalogue(const desk_service& desk) {
  std::string body = "<h1>GPUs to rent</h1><p>Rent a card for 3, 7 or 30 days. Each product sheet says how to measure "
                     "your workload on it, so that the days you rent are spent well.</p>";
  body += example_prices_banner(desk);
  body += "<div class=\"cards\">";
  for (const auto& c : desk.cards().cards()) {
    if (!desk.prices().price(c.id)) continue;
    body += fmt::format(
        "<div class=\"card\"><h2><a href=\"/gpu/{0}\">{1}</a></h2><p>{2:g} GB {3}, {4:g} GB/s</p><p>{5}</p>"
        "<a href=\"/order?gpu={0}\">Order</a></div>",
        html(c.id), html(c.name), c.memory_gb, html(c.memory_type), c.bandwidth_gbs, html(price_line(desk, c.id)));
  }
  body += "</div>";
  return layout("GPUs", body);
}

std::string card(const desk_service& desk, const catalogue_card& c) {
  std::string body = fmt::format("<h1>{}</h1>", html(c.name));
  body += example_prices_banner(desk);
  body += "<table><tbody>";
  body += fmt::format("<tr><th>memory</th><td>{:g} GB {}</td></tr>", c.memory_gb, html(c.memory_type));
  body += fmt::format("<tr><th>memory bandwidth</th><td>{:g} GB/s</td></tr>", c.bandwidth_gbs);
  body += fmt::format("<tr><th>architecture</th><td>{} (sm_{})</td></tr>", html(c.architecture), c.compute_capability);
  body += fmt::format("<tr><th>form factor</th><td>{}</td></tr>", html(c.form_factor));
  body += fmt::format("<tr><th>interconnect</th><td>{}</td></tr>", html(c.interconnect));
  body += fmt::format("<tr><th>board power</th><td>{:g} W</td></tr>", c.tdp_w);
  body += "<tr><th>formats (dense peak)</th><td>";
  bool first = true;
  for (const char* f : {"fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "int8"}) {
    const auto it = c.dense_tflops.find(f);
    if (it == c.dense_tflops.end()) continue;
    body += fmt::format("{}{} {:g} {}", first ? "" : "; ", f, it->second, std::string_view(f) == "int8" ? "TOPS" : "TFLOP/s");
    first = false;
  }
  body += "</td></tr>";
  const auto price = desk.prices().price(c.id);
  body += fmt::format("<tr><th>price</th><td id=\"price\">{}</td></tr>", html(price_line(desk, c.id)));
  if (price) {
    body += fmt::format("<tr><th>3 / 7 / 30 days</th><td>{} / {} / {} USD per GPU</td></tr>", format_usd_cents(*price * 3),
                        format_usd_cents(*price * 7), format_usd_cents(*price * 30));
  }
  body += fmt::format("</tbody></table><p class=\"mono\">Source: {}</p>", html(c.source));

  body += "<h2>Measuring your workload on this card</h2><ul>";
  body += "<li><b>Two loops.</b> Time the compute alone (inputs already on the GPU) and the whole path from the data on "
          "disk (read, decode, prepare, transfer, compute, bring back). The gap between them, stage by stage, is where "
          "your time goes.</li>";
  body += "<li><b>Finished work only.</b> GPU launches are asynchronous: read a clock only after the work it covers has "
          "finished (device events, or a synchronisation first).</li>";
  body += "<li><b>Batch as a controlled variable.</b> Sweep batch sizes with input length and type fixed; record the "
          "throughput of each.</li>";
  body += "<li><b>Interactive latency.</b> Look at p90, p99 and the maximum under a real arrival rate, not only the "
          "mean; the batch that gives the most throughput can make waiting unacceptable.</li>";
  body += fmt::format("<li><b>Memory past the model load.</b> {:g} GB holds the weights and must also hold the KV cache "
                      "and activations: measure them and report the headroom and the largest batch or context that "
                      "fits.</li>",
                      c.memory_gb);
  body += fmt::format("<li><b>Bandwidth bound.</b> A step that reads W GB of weights cannot take less than W / {:g} GB/s "
                      "on this card; compare what you measure with that limit.</li>",
                      c.bandwidth_gbs);
  body += "<li><b>Precision, recorded separately.</b> Weight storage, compute, accumulation and KV-cache precision are "
          "different things; a format the hardware advertises is not enabled until the engine really runs it.</li>";
  body += "<li><b>Exact hardware and a common recipe.</b> Record the exact variant, driver and library versions; compare "
          "only runs made with the same recipe.</li></ul>";
  body += "<h2>Choosing the rental length</h2><ul>"
          "<li><b>3 days</b>: profile compute against transfers, and memory per stage.</li>"
          "<li><b>7 days</b>: test fixes, repeat the measurements, compare batches or adaptations.</li>"
          "<li><b>30 days</b>: an inference campaign or a planned training, with regular evaluations.</li></ul>";
  body += "<h2>Privacy</h2><p>You keep control of your software and data: nothing inspects your files, prompts or "
          "computations. The desk keeps only what the order needs (the card, duration, quantity, environment, your "
          "contact details and the payment reference), and erases the contact details after the order closes.</p>";
  if (price) body += fmt::format("<p><a class=\"button\" href=\"/order?gpu={}\" id=\"order-link\">Order this GPU</a></p>", html(c.id));
  return layout(c.name, body);
}

std::string order_form(const desk_service& desk, const struct order_form& v, const field_errors& errors,
                       const std::string& csrf, const std::string& submission_key, const std::string& message) {
  std::string body = "<h1>Order a GPU</h1>";
  body += example_prices_banner(desk);
  if (!message.empty()) body += fmt::format("<p class=\"warn\" role=\"alert\">{}</p>", html(message));
  if (!errors.empty()) body += "<p class=\"warn\" role=\"alert\" id=\"form-errors\">Please correct the fields marked below.</p>";
  body += "<form class=\"order\" method=\"post\" action=\"/order\" novalidate>";
  body += fmt::format("<input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"submission\" value=\"{}\">",
                      html(csrf), html(submission_key));
  body += "<label for=\"gpu\">GPU model</label><select id=\"gpu\" name=\"gpu\"><option value=\"\">choose</option>";
  for (const auto& c : desk.cards().cards()) {
    const auto p = desk.prices().price(c.id);
    if (!p) continue;
    body += fmt::format("<option value=\"{}\"{}>{} - {} USD/day</option>", html(c.id), v.gpu == c.id ? " selected" : "",
                        html(c.name), format_usd_cents(*p));
  }
  body += "</select>" + field_error(errors, "gpu");
  body += "<label for=\"days\">Duration</label><select id=\"days\" name=\"days\">";
  for (const char* d : {"3", "7", "30"}) {
    body += fmt::format("<option value=\"{0}\"{1}>{0} days</option>", d, v.days == d ? " selected" : "");
  }
  body += "</select>" + field_error(errors, "days");
  body += fmt::format("<label for=\"quantity\">Quantity</label><input id=\"quantity\" name=\"quantity\" inputmode=\"numeric\" "
                      "value=\"{}\">{}",
                      html(v.quantity.empty() ? "1" : v.quantity), field_error(errors, "quantity"));
  body += fmt::format("<label for=\"environment\">Environment</label><input id=\"environment\" name=\"environment\" "
                      "maxlength=\"200\" list=\"environments\" placeholder=\"CUDA 12.4, PyTorch 2.5 - or bare\" value=\"{}\">{}"
                      "<datalist id=\"environments\"><option value=\"bare\"><option value=\"CUDA 12.4\">"
                      "<option value=\"CUDA 12.4, PyTorch 2.5\"><option value=\"CUDA 12.8, PyTorch 2.7, vLLM\"></datalist>",
                      html(v.environment), field_error(errors, "environment"));
  body += fmt::format("<label for=\"email\">Email</label><input id=\"email\" name=\"email\" type=\"email\" maxlength=\"254\" "
                      "value=\"{}\">{}",
                      html(v.email), field_error(errors, "email"));
  body += fmt::format("<label for=\"messenger\">Messenger handle (optional)</label><input id=\"messenger\" name=\"messenger\" "
                      "maxlength=\"64\" placeholder=\"telegram:@name\" value=\"{}\">{}",
                      html(v.messenger), field_error(errors, "messenger"));
  body += "<label for=\"network\">Pay with</label><select id=\"network\" name=\"network\">";
  for (const auto& n : desk.config().networks) {
    body += fmt::format("<option value=\"{}\"{}>{}</option>", html(n.id), v.network == n.id ? " selected" : "", html(n.label));
  }
  body += "</select>" + field_error(errors, "network");
  body += "<div><button type=\"submit\" id=\"submit-order\">Place order</button></div></form>";
  return layout("Order", body);
}

std::string order(const desk_service& desk, const order_record& o, const std::vector<transition_record>& history,
                  const std::string& token, const std::string& csrf, std::int64_t now_ms, const std::string& notice) {
  std::string body = fmt::format("<h1>Order <span id=\"reference\">{}</span></h1>", html(o.reference));
  if (!notice.empty()) body += fmt::format("<p class=\"notice\" id=\"notice\">{}</p>", html(notice));
  body += fmt::format("<p>Status: {}</p>", state_badge(o.state));
  body += "<table><tbody>";
  body += fmt::format("<tr><th>GPU</th><td>{} x {}</td></tr>", o.quantity, html(gpu_name(desk, o.gpu_id)));
  body += fmt::format("<tr><th>duration</th><td>{} days</td></tr>", o.days);
  body += fmt::format("<tr><th>environment</th><td>{}</td></tr>", html(o.environment.empty() ? "(erased)" : o.environment));
  body += fmt::format("<tr><th>contact</th><td>{}</td></tr>", html(mask_email(o.email)));
  body += fmt::format("<tr><th>price</th><td>{} USD per GPU-day, {} USD in all</td></tr>", format_usd_cents(o.usd_cents_per_day),
                      format_usd_cents(o.usd_cents_total));
  body += "</tbody></table>";
  const auto* network = desk.config().find_network(o.network);
  if (o.state == order_state::awaiting_payment || o.state == order_state::payment_reported) {
    body += "<section class=\"pay\" id=\"payment\"><h2>Payment instructions</h2>";
    if (network && network->example_address && network->address == o.address) {
      body += "<p class=\"warn\" id=\"example-address\">This desk runs with an EXAMPLE receiving address: do not send "
              "anything to it.</p>";
    }
    body += fmt::format("<p>Send exactly</p><p class=\"amount\" id=\"amount\">{} {}</p>", format_units(o.amount_units, o.decimals),
                        html(o.asset));
    body += fmt::format("<p>({} smallest units of {}, {} decimals)</p>", o.amount_units, html(o.asset), o.decimals);
    body += fmt::format("<table><tbody><tr><th>network</th><td id=\"network\">{}</td></tr>",
                        html(network ? network->label : o.network));
    body += fmt::format("<tr><th>to address</th><td class=\"mono\" id=\"address\">{}</td></tr>", html(o.address));
    body += fmt::format("<tr><th>order reference</th><td class=\"mono\">{}</td></tr>", html(o.reference));
    body += fmt::format("<tr><th>pay before</th><td id=\"expires\">{}</td></tr>", html(format_time_utc(o.expires_at_ms)));
    body += fmt::format("<tr><th>rate</th><td>1 {} = {} USD (operator's rate of {})</td></tr></tbody></table>", html(o.asset),
                        format_usd_cents(o.usd_cents_per_unit), html(o.rate_date));
    if (o.state == order_state::awaiting_payment && now_ms < o.expires_at_ms) {
      body += fmt::format(
          "<form method=\"post\" action=\"/o/{}/paid\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">"
          "<label for=\"tx_id\">Transaction id (optional)</label> <input id=\"tx_id\" name=\"tx_id\" maxlength=\"128\"> "
          "<button type=\"submit\" id=\"i-paid\">I paid</button></form>",
          html(token), html(csrf));
    } else if (o.state == order_state::awaiting_payment) {
      body += "<p class=\"warn\">The payment window has closed.</p>";
    } else {
      body += "<p id=\"reported\">You told us you paid. The operator confirms once the transfer arrives.</p>";
    }
    body += "</section>";
  }
  body += "<h2>History</h2>" + history_table(history);
  body += "<p>Keep this page's address: it is the only way to see this order.</p>";
  return layout("Order " + o.reference, body);
}

std::string login(const std::string& csrf, const std::string& error, bool configured) {
  std::string body = "<h1>Operator sign-in</h1>";
  if (!configured) body += "<p class=\"warn\">Operator sign-in is not configured (operator_password_hash).</p>";
  if (!error.empty()) body += fmt::format("<p class=\"warn\" role=\"alert\" id=\"login-error\">{}</p>", html(error));
  body += fmt::format(
      "<form class=\"order\" method=\"post\" action=\"/operator/login\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">"
      "<label for=\"password\">Password</label><input id=\"password\" name=\"password\" type=\"password\" "
      "autocomplete=\"current-password\"><div><button type=\"submit\" id=\"sign-in\">Sign in</button></div></form>",
      html(csrf));
  return layout("Operator sign-in", body);
}

std::string operator_list(const std::vector<order_record>& orders, const std::string& state,
                          const std::vector<std::pair<std::string, std::int64_t>>& counts, int page, bool more,
                          const std::string& csrf) {
  std::string body = "<h1>Orders</h1><p>";
  body += fmt::format("<a href=\"/operator\">all</a>");
  for (const auto& [s, n] : counts) body += fmt::format(" | <a href=\"/operator?state={0}\">{0} ({1})</a>", html(s), n);
  body += fmt::format("</p><form class=\"inline\" method=\"post\" action=\"/operator/logout\"><input type=\"hidden\" "
                      "name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button></form>",
                      html(csrf));
  body += "<table id=\"orders\"><thead><tr><th>reference</th><th>state</th><th>GPU</th><th>days</th><th>qty</th>"
          "<th>amount</th><th>created</th></tr></thead><tbody>";
  for (const auto& o : orders) {
    body += fmt::format("<tr><td><a href=\"/operator/orders/{0}\">{0}</a></td><td>{1}</td><td>{2}</td><td>{3}</td><td>{4}</td>"
                        "<td class=\"mono\">{5} {6}</td><td>{7}</td></tr>",
                        html(o.reference), state_badge(o.state), html(o.gpu_id), o.days, o.quantity,
                        format_units(o.amount_units, o.decimals), html(o.asset), html(format_time_utc(o.created_at_ms)));
  }
  body += "</tbody></table><p>";
  const std::string filter = state.empty() ? "" : "state=" + html(state) + "&amp;";
  if (page > 0) body += fmt::format("<a href=\"/operator?{}page={}\">newer</a> ", filter, page - 1);
  if (more) body += fmt::format("<a href=\"/operator?{}page={}\">older</a>", filter, page + 1);
  body += "</p>";
  return layout("Orders", body, true);
}

std::string operator_order(const desk_service& desk, const order_record& o, const std::vector<transition_record>& history,
                           const std::vector<order_state>& next, const std::string& csrf, const std::string& notice,
                           const std::string& error) {
  std::string body = fmt::format("<h1>Order <span id=\"reference\">{}</span></h1>", html(o.reference));
  if (!notice.empty()) body += fmt::format("<p class=\"notice\" id=\"notice\">{}</p>", html(notice));
  if (!error.empty()) body += fmt::format("<p class=\"warn\" role=\"alert\" id=\"move-error\">{}</p>", html(error));
  body += fmt::format("<p>Status: {}</p><table><tbody>", state_badge(o.state));
  body += fmt::format("<tr><th>GPU</th><td>{} x {}</td></tr>", o.quantity, html(gpu_name(desk, o.gpu_id)));
  body += fmt::format("<tr><th>duration</th><td>{} days</td></tr>", o.days);
  body += fmt::format("<tr><th>environment</th><td>{}</td></tr>", html(o.environment));
  body += fmt::format("<tr><th>email</th><td>{}</td></tr>", html(o.contact_erased_at_ms ? "(erased)" : o.email));
  body += fmt::format("<tr><th>messenger</th><td>{}</td></tr>", html(o.messenger));
  body += fmt::format("<tr><th>amount</th><td class=\"mono\">{} {} ({} units) on {}</td></tr>",
                      format_units(o.amount_units, o.decimals), html(o.asset), o.amount_units, html(o.network));
  body += fmt::format("<tr><th>to address</th><td class=\"mono\">{}</td></tr>", html(o.address));
  body += fmt::format("<tr><th>transaction id</th><td class=\"mono\" id=\"tx-id\">{}</td></tr>", html(o.tx_id));
  body += fmt::format("<tr><th>payment window ends</th><td>{}</td></tr>", html(format_time_utc(o.expires_at_ms)));
  body += "</tbody></table>";
  if (!next.empty()) {
    body += "<h2>Move the order</h2>";
    for (const auto s : next) {
      body += fmt::format(
          "<form class=\"inline\" method=\"post\" action=\"/operator/orders/{0}/move\"><input type=\"hidden\" name=\"csrf\" "
          "value=\"{1}\"><input type=\"hidden\" name=\"to\" value=\"{2}\"><input name=\"note\" maxlength=\"500\" "
          "placeholder=\"note (optional)\"> <button type=\"submit\" id=\"move-{2}\">{2}</button></form>",
          html(o.reference), html(csrf), to_string(s));
    }
  }
  body += "<h2>History</h2>" + history_table(history);
  return layout("Order " + o.reference, body, true);
}

std::string error(int status, const std::string& message) {
  return layout(fmt::format("{}", status), fmt::format("<h1>{}</h1><p>{}</p>", status, html(message)));
}

}  // namespace itera::desk::pages
