// The Jinja subset's functions, methods, filters and tests (the list is in text/jinja.hpp's header
// comment): the members of jinja::evaluator that know them, defined apart to keep jinja.hpp short.
#pragma once

#ifndef STRATA_JINJA_EVALUATOR_DECLARED
#error "include <strata/text/jinja.hpp>, not jinja_builtins.hpp"
#endif

namespace strata::jinja {

// raise_exception, namespace, range, dict and strftime_now; obj.method(...) for the methods.
inline value evaluator::call(const expr& e) {
    const expr& callee = *e.args[0];
    if (callee.type == expr::kind::attribute) return method(e, eval(*callee.args[0]), callee.name);
    if (callee.type != expr::kind::name)
        fail(e.pos, "only named functions and methods can be called", "call raise_exception, namespace, range or a method");
    const std::string& f = callee.name;
    const std::vector<value> args = arguments(e, 1);
    if (f == "raise_exception") {
        const std::string message = args.empty() ? std::string("raise_exception()") : detail::python_str(args[0]);
        throw error(std::string(m_name) + " " + line_column(m_src, e.pos) + ": the template raised an exception: " + message,
                    "the conversation does not have the form this chat template accepts");
    }
    if (f == "namespace" || f == "dict") {
        value out = value::object();
        if (!args.empty() && args[0].is_object()) out = args[0];
        for (const auto& [k, v] : e.kwargs) out[k] = eval(*v);
        return out;
    }
    if (f == "range") {
        for (const value& a : args)
            if (!a.is_number_integer()) fail(e.pos, "range() of " + describe(a), "pass integers");
        if (args.empty() || args.size() > 3) fail(e.pos, "range() takes 1 to 3 arguments", "range(stop) or range(start, stop[, step])");
        const std::int64_t start = args.size() > 1 ? args[0].get<std::int64_t>() : 0;
        const std::int64_t stop = args.size() > 1 ? args[1].get<std::int64_t>() : args[0].get<std::int64_t>();
        const std::int64_t step = args.size() > 2 ? args[2].get<std::int64_t>() : 1;
        if (step == 0) fail(e.pos, "range() step of 0", "use a non-zero step");
        const std::int64_t most = std::min<std::int64_t>(max_items, static_cast<std::int64_t>(m_limits.max_bytes / item_bytes));
        if ((stop - start) / step > most)
            fail(e.pos, "range() of more than " + std::to_string(most) + " items", "no chat template needs that");
        value out = value::array();
        for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
        return out;
    }
    if (f == "strftime_now") {
        if (args.size() != 1 || !args[0].is_string()) fail(e.pos, "strftime_now takes one format string", "e.g. strftime_now(\"%d %b %Y\")");
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char buffer[256];
        const std::size_t n = std::strftime(buffer, sizeof buffer, args[0].get_ref<const std::string&>().c_str(), &local);
        return std::string(buffer, n);
    }
    fail(callee.pos, "unknown function '" + f + "'",
         "the supported functions are raise_exception, namespace, range, dict and strftime_now");
}

inline value evaluator::method(const expr& e, const value& target, const std::string& name) {
    const std::vector<value> args = arguments(e, 1);
    const auto arg = [&](std::size_t i, std::string_view key, value fallback = nullptr) {
        return keyword(e, key, args, i, std::move(fallback));
    };
    if (target.is_string()) {
        const std::string& s = target.get_ref<const std::string&>();
        if (name == "strip" || name == "lstrip" || name == "rstrip")
            return detail::strip(s, name != "rstrip", name != "lstrip", arg(0, "chars"));
        if (name == "startswith" || name == "endswith") {
            const value what = arg(0, "prefix");
            const auto one = [&](const value& p) {
                if (!p.is_string()) fail(e.pos, name + "() of " + describe(p), "pass a string or a tuple of strings");
                return name == "startswith" ? s.starts_with(p.get<std::string>()) : s.ends_with(p.get<std::string>());
            };
            if (!what.is_array()) return one(what);
            for (const value& p : what)
                if (one(p)) return true;
            return false;
        }
        if (name == "split") {
            const value limit = arg(1, "maxsplit", -1);
            return detail::split(s, arg(0, "sep"), limit.is_number_integer() ? limit.get<std::int64_t>() : -1);
        }
        if (name == "upper" || name == "lower") return detail::ascii_case(s, name == "upper");
        if (name == "capitalize" || name == "title") return apply_filter(e, name, target, {});
        if (name == "replace") return apply_filter(e, "replace", target, args);
    }
    if (target.is_object()) {
        if (name == "items" || name == "keys" || name == "values") {
            value out = value::array();
            for (auto it = target.begin(); it != target.end(); ++it) {
                if (name == "items") out.push_back(value::array({it.key(), *it}));
                else out.push_back(name == "keys" ? value(it.key()) : *it);
            }
            return out;
        }
        if (name == "get") {
            const value key = arg(0, "key");
            if (key.is_string())
                if (auto it = target.find(key.get<std::string>()); it != target.end()) return *it;
            return arg(1, "default");
        }
    }
    fail(e.pos, "unknown method '" + name + "' of " + describe(target),
         "the supported methods are strip, lstrip, rstrip, startswith, endswith, split, upper, lower, replace, title, "
         "capitalize (strings) and items, keys, values, get (mappings)");
}

inline value evaluator::filter(const expr& e) { return apply_filter(e, e.name, eval(*e.args[0]), arguments(e, 1)); }

inline value evaluator::apply_filter(const expr& e, const std::string& name, const value& v, const std::vector<value>& args) {
    const auto arg = [&](std::size_t i, std::string_view key, value fallback = nullptr) {
        return keyword(e, key, args, i, std::move(fallback));
    };
    const auto need_string = [&]() -> const std::string& {
        if (!v.is_string()) fail(e.pos, "filter '" + name + "' of " + describe(v), "apply it to a string");
        return v.get_ref<const std::string&>();
    };
    if (name == "default" || name == "d") {
        const bool boolean = truthy(arg(1, "boolean", false));
        return is_undefined(v) || (boolean && !truthy(v)) ? arg(0, "default_value", "") : v;
    }
    if (name == "tojson") {
        const value indent = arg(0, "indent");
        const std::int64_t width = indent.is_number_integer() ? indent.get<std::int64_t>() : -1;
        std::string out;
        try {
            detail::python_json(v, width < 0 ? -1 : static_cast<int>(std::min<std::int64_t>(width, 1 << 20)), 0, out,
                                m_limits.max_bytes);
        } catch (const std::length_error&) {
            within_bytes(m_limits.max_bytes + 1, e.pos, "tojson's text");
        }
        return out;
    }
    if (name == "string") return detail::python_str(v);
    if (is_undefined(v) && name != "items" && name != "list" && name != "length" && name != "count")
        fail(e.pos, "filter '" + name + "' of an undefined value", "check that the value is defined (is defined), or use | default");
    if (name == "trim") return detail::strip(need_string(), true, true, arg(0, "chars"));
    if (name == "upper" || name == "lower") return detail::ascii_case(need_string(), name == "upper");
    if (name == "capitalize" || name == "title") {
        std::string s = detail::ascii_case(need_string(), false);
        for (std::size_t i = 0; i < s.size(); ++i) {
            const bool word_start = i == 0 || (name == "title" && !std::isalnum(static_cast<unsigned char>(s[i - 1])));
            if (word_start && s[i] >= 'a' && s[i] <= 'z') s[i] = static_cast<char>(s[i] - 'a' + 'A');
        }
        return s;
    }
    if (name == "replace") {
        const value from = arg(0, "old"), to = arg(1, "new"), count = arg(2, "count", -1);
        if (!from.is_string() || !to.is_string()) fail(e.pos, "replace() needs two strings", "e.g. replace(\"a\", \"b\")");
        const std::string& s = need_string();
        const std::string& old_text = from.get_ref<const std::string&>();
        const std::string& new_text = to.get_ref<const std::string&>();
        const std::int64_t most = count.is_number_integer() ? count.get<std::int64_t>() : -1;
        if (new_text.size() > old_text.size() && !old_text.empty()) {  // the result's size, before it is built
            std::size_t hits = 0;
            for (std::size_t at = s.find(old_text); at != std::string::npos && (most < 0 || static_cast<std::int64_t>(hits) < most);
                 at = s.find(old_text, at + old_text.size()))
                ++hits;
            within_bytes(s.size() + hits * (new_text.size() - old_text.size()), e.pos, "replace()'s string");
        }
        return detail::replace_all(s, old_text, new_text, most);
    }
    if (name == "int" || name == "float") {
        try {
            if (v.is_string()) return name == "int" ? value(std::stoll(v.get<std::string>())) : value(std::stod(v.get<std::string>()));
        } catch (const std::exception&) {
            return arg(0, "default", 0);
        }
        if (!v.is_number() && !v.is_boolean()) return arg(0, "default", 0);
        return name == "int" ? value(v.get<std::int64_t>()) : value(v.get<double>());
    }
    const value items = iterate(v, e.pos);
    if (name == "length" || name == "count") return items.size();
    if (name == "list") return items;
    if (name == "first" || name == "last") return items.empty() ? undefined() : name == "first" ? items.front() : items.back();
    if (name == "reverse") {
        value out = value::array();
        for (auto it = items.rbegin(); it != items.rend(); ++it) out.push_back(*it);
        return v.is_string() ? value(apply_filter(e, "join", out, {})) : out;
    }
    if (name == "join") {
        const value separator = arg(0, "d", ""), attribute = arg(1, "attribute");
        std::string out;
        for (std::size_t i = 0; i < items.size(); ++i) {
            const value& item = attribute.is_string() && items[i].is_object() ? items[i].value(attribute.get<std::string>(), value())
                                                                                : items[i];
            out += (i ? detail::python_str(separator) : "") + detail::python_str(item);
            within_bytes(out.size(), e.pos, "join's string");
        }
        return out;
    }
    if (name == "items") {
        if (!v.is_object() && !is_undefined(v)) fail(e.pos, "filter 'items' of " + describe(v), "apply it to a mapping");
        value out = value::array();
        if (v.is_object())
            for (auto it = v.begin(); it != v.end(); ++it) out.push_back(value::array({it.key(), *it}));
        return out;
    }
    if (name == "selectattr" || name == "rejectattr") return select(e, items, args, true, name == "selectattr");
    if (name == "select" || name == "reject") return select(e, items, args, false, name == "select");
    if (name == "map") {
        const value attribute = keyword(e, "attribute", {}, 0, nullptr);
        value out = value::array();
        for (const value& item : items) {
            if (attribute.is_string()) {
                out.push_back(item.is_object() ? item.value(attribute.get<std::string>(), undefined()) : undefined());
            } else {
                if (args.empty() || !args[0].is_string()) fail(e.pos, "map() needs a filter name or attribute=", "e.g. map(attribute='content')");
                out.push_back(apply_filter(e, args[0].get<std::string>(), item, {args.begin() + 1, args.end()}));
            }
        }
        return out;
    }
    fail(e.pos, "unknown filter '" + name + "'", "see the supported filters in strata/text/jinja.hpp");
}

// selectattr("role", "equalto", "user"), rejectattr("x"), select("string"), reject("none").
inline value evaluator::select(const expr& e, const value& items, const std::vector<value>& args, bool by_attribute, bool keep) {
    std::size_t next = 0;
    std::string attribute;
    if (by_attribute) {
        if (args.empty() || !args[0].is_string()) fail(e.pos, "selectattr/rejectattr need an attribute name", "e.g. selectattr(\"role\", \"equalto\", \"user\")");
        attribute = args[next++].get<std::string>();
    }
    std::string test_name;
    if (next < args.size()) {
        if (!args[next].is_string()) fail(e.pos, "the test of select/reject is " + describe(args[next]), "name a test, e.g. \"equalto\"");
        test_name = args[next++].get<std::string>();
    }
    const std::vector<value> test_args(args.begin() + static_cast<std::ptrdiff_t>(next), args.end());
    value out = value::array();
    for (const value& item : items) {
        const value subject = !by_attribute ? item : item.is_object() ? item.value(attribute, undefined()) : undefined();
        const bool pass = test_name.empty() ? truthy(subject) : apply_test(e, test_name, subject, test_args);
        if (pass == keep) out.push_back(item);
    }
    return out;
}

inline bool evaluator::test(const expr& e) { return apply_test(e, e.name, eval(*e.args[0]), arguments(e, 1)); }

inline bool evaluator::apply_test(const expr& e, const std::string& name, const value& v, const std::vector<value>& args) {
    const auto other = [&]() -> const value& {
        if (args.empty()) fail(e.pos, "the test '" + name + "' needs an argument", "e.g. x is " + name + " 2");
        return args[0];
    };
    if (name == "defined") return !is_undefined(v);
    if (name == "undefined") return is_undefined(v);
    if (name == "none") return v.is_null();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.is_number_integer();
    if (name == "float") return v.is_number_float();
    if (name == "boolean") return v.is_boolean();
    if (name == "true" || name == "false") return v.is_boolean() && v.get<bool>() == (name == "true");
    if (name == "mapping") return v.is_object();
    if (name == "iterable" || name == "sequence") return v.is_array() || v.is_object() || v.is_string();
    if (name == "lower" || name == "upper") return v.is_string() && detail::ascii_case(v.get<std::string>(), name == "upper") == v.get<std::string>();
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equal(v, other());
    if (name == "ne") return !equal(v, other());
    if (name == "in") return contains(e, other(), v);
    if (name == "even" || name == "odd" || name == "divisibleby") {
        if (!v.is_number_integer()) fail(e.pos, "the test '" + name + "' of " + describe(v), "apply it to an integer");
        const std::int64_t by = name == "divisibleby" ? other().get<std::int64_t>() : 2;
        if (by == 0) fail(e.pos, "divisibleby 0", "use a non-zero divisor");
        const bool divisible = v.get<std::int64_t>() % by == 0;
        return name == "odd" ? !divisible : divisible;
    }
    if (name == "lt" || name == "le" || name == "gt" || name == "ge") {
        const value& b = other();
        if (!(v.is_number() && b.is_number()) && !(v.is_string() && b.is_string()))
            fail(e.pos, "the test '" + name + "' between " + describe(v) + " and " + describe(b), "compare numbers or strings");
        return name == "lt" ? v < b : name == "le" ? !(b < v) : name == "gt" ? b < v : !(v < b);
    }
    fail(e.pos, "unknown test '" + name + "'", "see the supported tests in strata/text/jinja.hpp");
}

}  // namespace strata::jinja
