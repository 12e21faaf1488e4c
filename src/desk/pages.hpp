#pragma once
// Server-rendered pages. Every value that came from a person or a file goes through html() first.
#include <string>
#include <string_view>
#include <vector>

#include "itera/desk/service.hpp"

namespace itera { struct catalogue_card; }

namespace itera::desk::pages {

std::string html(std::string_view s);   // escapes & < > " '
extern const char* const stylesheet;    // /static/desk.css

std::string catalogue(const desk_service& desk);
std::string card(const desk_service& desk, const catalogue_card& card);
std::string order_form(const desk_service& desk, const order_form& values, const field_errors& errors,
                       const std::string& csrf, const std::string& submission_key, const std::string& message);
std::string order(const desk_service& desk, const order_record& o, const std::vector<transition_record>& history,
                  const std::string& token, const std::string& csrf, std::int64_t now_ms, const std::string& notice);
std::string login(const std::string& csrf, const std::string& error, bool configured);
std::string operator_list(const std::vector<order_record>& orders, const std::string& state,
                          const std::vector<std::pair<std::string, std::int64_t>>& counts, int page, bool more,
                          const std::string& csrf);
std::string operator_order(const desk_service& desk, const order_record& o, const std::vector<transition_record>& history,
                           const std::vector<order_state>& next, const std::string& csrf, const std::string& notice,
                           const std::string& error);
std::string error(int status, const std::string& message);

// "a***@example.com": enough for the customer to recognise, not enough to harvest from a leaked link.
std::string mask_email(std::string_view email);

}  // namespace itera::desk::pages
