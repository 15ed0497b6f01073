// A small interpreter for the Jinja subset that Hugging Face chat templates use (Llama 2 / 3 / 3.1,
// Mistral, Qwen2 / 2.5), rendering as transformers' apply_chat_template does (jinja2 with
// trim_blocks and lstrip_blocks; text/jinja_parse.hpp has the lexer and the parser).
//
// The subset:
//   text, {{ expr }}, {# comment #}, whitespace control {%- -%} {{- -}} {#- -#} (and {%+)
//   {% if %} {% elif %} {% else %} {% endif %}
//   {% for x in xs [if cond] %} ... [{% else %}] {% endfor %}, `for k, v in d.items()`, loop.index0,
//     index, first, last, length, revindex, revindex0; {% break %} {% continue %}
//   {% set x = expr %}, {% set ns.attr = expr %} (on namespace()), {% set x %}...{% endset %}
//   {% generation %}...{% endgeneration %} (transformers' assistant marker: rendered as its body)
//   literals: strings with Python escapes, integers, floats, true/false/none (and True/False/None),
//     [lists], (tuples), {dicts}
//   operators: + - * / // % ** ~, == != < > <= >=, and or not, in, not in, `a if c else b`
//   member and subscript access, negative indices, slices xs[a:b:c]
//   filters: trim length count tojson upper lower capitalize title default d join items list first
//     last string int float replace selectattr rejectattr select reject map reverse
//   tests (`is` / `is not`): defined undefined none string number integer float boolean mapping
//     iterable sequence true false even odd divisibleby equalto eq ne lt le gt ge lower upper in sameas
//   methods: strings' strip lstrip rstrip startswith endswith split upper lower replace title
//     capitalize; mappings' items keys values get
//   functions: raise_exception(msg) (a strata::error carrying msg), namespace(...), range(...),
//     dict(...), strftime_now(format) (the local time, as transformers gives it)
// Anything else (macros, includes, other filters or tests, calls of unknown functions, arithmetic
// on an undefined value) is a strata::error naming the construct and its line:column.
//
// A rendering is bounded (render_limits), so that a hostile template cannot take all memory or
// time: its output, and every value it computes (a string's bytes; a list's or a mapping's items
// and strings), stay under max_bytes; the statements it runs, the loop iterations and the
// expressions it evaluates, under max_steps. Past a bound: a strata::error naming the line.
//
// Values are nlohmann::ordered_json: a JSON value as the template sees it, mappings keeping their
// insertion order as Python's dicts do (tojson and items() show it); Jinja's undefined is a
// discarded value (is_discarded()). Tuples are lists: {{ (1, 2) }} prints [1, 2] where Python
// prints (1, 2), the one difference in output found against jinja2 3.1.6 (text/jinja_test.cpp).
#pragma once

#include <strata/core/error.hpp>          // strata::error
#include <strata/text/jinja_parse.hpp>    // jinja::parser, node, expr, line_column

#include <nlohmann/json.hpp>  // nlohmann::ordered_json

#include <algorithm>    // std::min, std::max
#include <cctype>       // std::isalnum
#include <charconv>     // std::to_chars
#include <cmath>        // std::floor, std::fmod, std::pow
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <ctime>        // std::time, std::strftime, localtime_r
#include <memory>       // std::shared_ptr, std::make_shared
#include <stdexcept>    // std::length_error
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

namespace strata::jinja {

using value = nlohmann::ordered_json;

inline value undefined() { return value(value::value_t::discarded); }
inline bool is_undefined(const value& v) { return v.is_discarded(); }

inline bool truthy(const value& v) {
    if (is_undefined(v) || v.is_null()) return false;
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
    if (v.is_number()) return v.get<double>() != 0.0;
    if (v.is_string()) return !v.get_ref<const std::string&>().empty();
    return !v.empty();
}

namespace detail {

// The byte offsets where the code points of a UTF-8 string start, and its size at the end:
// Python's strings are indexed and measured in code points.
inline std::vector<std::size_t> code_point_starts(std::string_view s) {
    std::vector<std::size_t> starts;
    for (std::size_t i = 0; i < s.size(); ++i)
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
    starts.push_back(s.size());
    return starts;
}

inline std::string python_number(const value& v) {
    if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
    const double d = v.get<double>();
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buffer[64];
    const auto r = std::to_chars(buffer, buffer + sizeof buffer, d);
    std::string s(buffer, r.ptr);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return s;
}

inline std::string python_string_repr(const std::string& s) {
    const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
    std::string out(1, quote);
    for (char c : s) {
        if (c == '\\' || c == quote) out += '\\';
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else out += c;
    }
    return out + quote;
}

// str(value) in Python, which is what {{ value }} prints.
inline std::string python_str(const value& v, bool nested = false) {
    if (is_undefined(v)) return "";
    if (v.is_string()) return nested ? python_string_repr(v.get<std::string>()) : v.get<std::string>();
    if (v.is_null()) return "None";
    if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
    if (v.is_number()) return python_number(v);
    std::string out = v.is_array() ? "[" : "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
        out += first ? "" : ", ";
        first = false;
        if (v.is_object()) out += python_string_repr(it.key()) + ": ";
        out += python_str(*it, true);
    }
    return out + (v.is_array() ? "]" : "}");
}

inline void json_string(const std::string& s, std::string& out) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    static constexpr char digits[] = "0123456789abcdef";
                    out += "\\u00";
                    out += digits[c >> 4];
                    out += digits[c & 15];
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    out += '"';
}

// Python's json.dumps(v, ensure_ascii=False, indent=indent), as transformers' tojson filter calls
// it: ", " and ": " between items without indent, newlines and `indent` spaces with it. Throws
// std::length_error before `out` would pass max_bytes (a huge indent asks for terabytes).
inline void python_json(const value& v, int indent, int depth, std::string& out,
                        std::size_t max_bytes = std::string::npos) {
    if (v.is_string()) return json_string(v.get<std::string>(), out);
    if (v.is_null() || is_undefined(v)) {
        out += "null";
        return;
    }
    if (v.is_boolean()) {
        out += v.get<bool>() ? "true" : "false";
        return;
    }
    if (v.is_number()) {
        std::string n = python_number(v);
        out += n == "nan" ? "NaN" : n == "inf" ? "Infinity" : n == "-inf" ? "-Infinity" : n;
        return;
    }
    const bool array = v.is_array();
    if (v.empty()) {
        out += array ? "[]" : "{}";
        return;
    }
    const auto newline = [&](int d) {
        if (indent < 0) return;
        const std::size_t spaces = static_cast<std::size_t>(indent) * static_cast<std::size_t>(d);
        if (out.size() + 1 + spaces > max_bytes) throw std::length_error("python_json: past max_bytes");
        out += '\n';
        out.append(spaces, ' ');
    };
    out += array ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += indent < 0 ? ", " : ",";
        first = false;
        newline(depth + 1);
        if (!array) {
            json_string(it.key(), out);
            out += ": ";
        }
        python_json(*it, indent, depth + 1, out, max_bytes);
        if (out.size() > max_bytes) throw std::length_error("python_json: past max_bytes");
    }
    newline(depth);
    out += array ? ']' : '}';
}

inline bool is_python_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

inline std::string strip(std::string_view s, bool left, bool right, const value& chars) {
    const auto strip_this = [&](char c) {
        if (chars.is_string()) return chars.get_ref<const std::string&>().find(c) != std::string::npos;
        return is_python_space(c);
    };
    std::size_t b = 0, e = s.size();
    if (left)
        while (b < e && strip_this(s[b])) ++b;
    if (right)
        while (e > b && strip_this(s[e - 1])) --e;
    return std::string(s.substr(b, e - b));
}

inline std::string ascii_case(std::string s, bool upper) {
    for (char& c : s)
        if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
        else if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return s;
}

inline std::string replace_all(std::string s, const std::string& from, const std::string& to, std::int64_t count) {
    if (from.empty()) return s;
    std::string out;
    std::size_t at = 0;
    for (std::int64_t done = 0; count < 0 || done < count; ++done) {
        const std::size_t hit = s.find(from, at);
        if (hit == std::string::npos) break;
        out += s.substr(at, hit - at) + to;
        at = hit + from.size();
    }
    return out + s.substr(at);
}

// Python's str.split(sep, maxsplit): without sep, runs of whitespace separate and ends are dropped.
inline value split(const std::string& s, const value& sep, std::int64_t maxsplit) {
    value out = value::array();
    if (!sep.is_string()) {
        std::size_t i = 0;
        while (i < s.size()) {
            while (i < s.size() && is_python_space(s[i])) ++i;
            if (i == s.size()) break;
            if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
                out.push_back(strip(s.substr(i), false, true, value()));
                break;
            }
            std::size_t j = i;
            while (j < s.size() && !is_python_space(s[j])) ++j;
            out.push_back(s.substr(i, j - i));
            i = j;
        }
        return out;
    }
    const std::string& by = sep.get_ref<const std::string&>();
    std::size_t at = 0;
    for (;;) {
        const std::size_t hit = maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit ? std::string::npos : s.find(by, at);
        if (hit == std::string::npos) break;
        out.push_back(s.substr(at, hit - at));
        at = hit + by.size();
    }
    out.push_back(s.substr(at));
    return out;
}

// Python's slice index arithmetic (PySlice_AdjustIndices): the positions a[start:stop:step] takes.
inline std::vector<std::int64_t> slice_positions(std::int64_t n, const value& start, const value& stop, std::int64_t step) {
    const auto clamp = [&](const value& v, std::int64_t fallback) {
        if (v.is_null()) return fallback;
        std::int64_t i = v.get<std::int64_t>();
        if (i < 0) i += n;
        if (step > 0) return std::clamp<std::int64_t>(i, 0, n);
        return std::clamp<std::int64_t>(i, -1, n - 1);
    };
    const std::int64_t b = clamp(start, step > 0 ? 0 : n - 1), e = clamp(stop, step > 0 ? n : -1);
    std::vector<std::int64_t> out;
    for (std::int64_t i = b; step > 0 ? i < e : i > e; i += step) out.push_back(i);
    return out;
}

}  // namespace detail

// The bounds on one rendering, far beyond a chat template's needs: it takes some tens of steps a
// message, and a conversation of a million tokens is a few MB. 4M steps take seconds.
struct render_limits {
    std::size_t max_bytes = std::size_t{64} << 20;  // the output, and any one value
    std::int64_t max_steps = 4'000'000;             // statements, loop iterations, expressions
};

// A parsed template; render() may be called many times, also from several threads.
class compiled_template {
public:
    // `name` opens every message ("chat template", "tokenizer_config.json chat_template").
    static compiled_template parse(std::string source, std::string name = "template") {
        // jinja2 reads "\r\n" as "\n" and drops the one newline that ends the source
        std::size_t crlf;
        while ((crlf = source.find("\r\n")) != std::string::npos) source.erase(crlf, 1);
        if (source.ends_with('\n')) source.pop_back();
        auto program = std::make_shared<program_t>();
        program->source = std::move(source);
        program->name = std::move(name);
        program->tree = parser(program->source, program->name).parse();
        return compiled_template(std::move(program));
    }

    // `variables` is an object: the template's global names.
    std::string render(const value& variables, const render_limits& limits = {}) const;

    const std::string& source() const { return m_program->source; }

private:
    struct program_t {
        std::string source, name;
        body tree;
    };
    explicit compiled_template(std::shared_ptr<const program_t> p) : m_program(std::move(p)) {}

    std::shared_ptr<const program_t> m_program;
};

// One rendering: the scopes of names, and what is written.
class evaluator {
public:
    evaluator(std::string_view source, std::string_view name, const value& variables, const render_limits& limits = {})
        : m_src(source), m_name(name), m_limits(limits) {
        m_scopes.push_back(variables.is_object() ? variables : value::object());
    }

    std::string render(const body& tree) {
        std::string out;
        run(tree, out);
        return out;
    }

public:
    // The most items a range() or a repeated string may have: far beyond any chat, and a bound
    // that keeps a hostile template from taking all memory.
    static constexpr std::int64_t max_items = 1 << 24;
    // What a value counts for each item of a list or a mapping, beside its strings' bytes
    static constexpr std::size_t item_bytes = sizeof(value);

private:
    enum class flow { normal, loop_break, loop_continue };

    [[noreturn]] void fail(std::size_t pos, const std::string& what, const std::string& hint) const {
        throw error(std::string(m_name) + " " + line_column(m_src, pos) + ": " + what, hint);
    }

    // ---- bounds (render_limits) ----

    // One more statement, loop iteration or expression, at `pos`.
    void step(std::size_t pos) {
        if (++m_steps > m_limits.max_steps)
            fail(pos, "the template took more than " + std::to_string(m_limits.max_steps) +
                          " steps (statements, loop iterations and expressions)",
                 "a chat template walks the messages a few times; look for loops nested deep or over huge ranges");
    }

    // The bytes `v` counts for (its strings, and item_bytes an item), counted until past `limit`.
    static std::size_t size_of(const value& v, std::size_t limit) {
        if (v.is_string()) return v.get_ref<const std::string&>().size();
        if (!v.is_structured()) return 0;
        std::size_t total = 0;
        for (auto it = v.begin(); it != v.end() && total <= limit; ++it) {
            total += item_bytes + size_of(*it, limit - std::min(total, limit));
            if (v.is_object()) total += it.key().size();
        }
        return total;
    }

    // `what` (the output, a value, a string being built) at `pos` may not pass max_bytes.
    void within_bytes(std::size_t bytes, std::size_t pos, const std::string& what) const {
        if (bytes > m_limits.max_bytes)
            fail(pos, what + " of more than " + std::to_string(m_limits.max_bytes) + " bytes",
                 "no chat template needs that; look for a string, list or output that grows in a loop");
    }

    value checked(value v, std::size_t pos) const {
        if (v.is_string() || v.is_structured()) within_bytes(size_of(v, m_limits.max_bytes), pos, "a value");
        return v;
    }

    // ---- statements ----

    flow run(const body& b, std::string& out) {
        for (const node& n : b) {
            const flow f = run(n, out);
            if (f != flow::normal) return f;
        }
        return flow::normal;
    }

    flow run(const node& n, std::string& out) {
        step(n.pos);
        switch (n.type) {
            case node::kind::text:
                out += n.text;
                within_bytes(out.size(), n.pos, "output");
                return flow::normal;
            case node::kind::output:
                out += detail::python_str(eval(*n.value));
                within_bytes(out.size(), n.pos, "output");
                return flow::normal;
            case node::kind::if_chain:
                for (const auto& [condition, branch] : n.branches)
                    if (!condition || truthy(eval(*condition))) return run(branch, out);
                return flow::normal;
            case node::kind::for_loop: return run_for(n, out);
            case node::kind::set: set(n, eval(*n.value)); return flow::normal;
            case node::kind::set_block: {
                std::string text;
                run(n.children, text);
                set(n, value(std::move(text)));
                return flow::normal;
            }
            case node::kind::generation: return run(n.children, out);
            case node::kind::loop_break:
            case node::kind::loop_continue:
                if (m_loop_depth == 0) fail(n.pos, "{% break %} or {% continue %} outside a loop", "use them inside {% for %}");
                return n.type == node::kind::loop_break ? flow::loop_break : flow::loop_continue;
        }
        return flow::normal;
    }

    void set(const node& n, value v) {
        if (n.attribute.empty()) {
            m_scopes.back()[n.targets[0]] = std::move(v);
            return;
        }
        value* target = find(n.targets[0]);
        if (!target || !target->is_object())
            fail(n.pos, "cannot set the attribute '" + n.attribute + "' of '" + n.targets[0] + "', which is not a namespace",
                 "create it first: {% set " + n.targets[0] + " = namespace() %}");
        (*target)[n.attribute] = std::move(v);
    }

    void bind(const node& n, const value& item, value& scope) {
        if (n.targets.size() == 1) {
            scope[n.targets[0]] = item;
            return;
        }
        if (!item.is_array() || item.size() != n.targets.size())
            fail(n.pos, "cannot unpack " + describe(item) + " into " + std::to_string(n.targets.size()) + " loop variables",
                 "iterate over pairs, e.g. `for k, v in d.items()`");
        for (std::size_t i = 0; i < n.targets.size(); ++i) scope[n.targets[i]] = item[i];
    }

    flow run_for(const node& n, std::string& out) {
        const value items = iterate(eval(*n.value), n.value->pos);
        std::vector<const value*> kept;
        m_scopes.push_back(value::object());
        for (const value& item : items) {
            if (n.condition) {
                bind(n, item, m_scopes.back());
                if (!truthy(eval(*n.condition))) continue;
            }
            kept.push_back(&item);
        }
        ++m_loop_depth;
        for (std::size_t i = 0; i < kept.size(); ++i) {
            step(n.pos);
            value& scope = m_scopes.back();
            bind(n, *kept[i], scope);
            const auto count = static_cast<std::int64_t>(kept.size()), k = static_cast<std::int64_t>(i);
            scope["loop"] = value{{"index0", k},       {"index", k + 1},          {"first", i == 0},
                                  {"last", i + 1 == kept.size()}, {"length", count}, {"revindex", count - k},
                                  {"revindex0", count - k - 1}};
            if (run(n.children, out) == flow::loop_break) break;
        }
        --m_loop_depth;
        m_scopes.pop_back();
        if (kept.empty()) run(n.otherwise, out);
        return flow::normal;
    }

    // What `for` walks: a list's items, a mapping's keys, a string's characters; nothing for undefined.
    value iterate(const value& v, std::size_t pos) const {
        if (is_undefined(v)) return value::array();
        if (v.is_array()) return v;
        value out = value::array();
        if (v.is_object()) {
            for (auto it = v.begin(); it != v.end(); ++it) out.push_back(it.key());
            return out;
        }
        if (v.is_string()) {
            const std::string& s = v.get_ref<const std::string&>();
            const auto starts = detail::code_point_starts(s);
            for (std::size_t i = 0; i + 1 < starts.size(); ++i) out.push_back(s.substr(starts[i], starts[i + 1] - starts[i]));
            return out;
        }
        fail(pos, describe(v) + " is not iterable", "iterate over a list, a mapping or a string");
    }

    // ---- names ----

    value* find(const std::string& name) {
        for (auto it = m_scopes.rbegin(); it != m_scopes.rend(); ++it)
            if (auto f = it->find(name); f != it->end()) return &*f;
        return nullptr;
    }

    static std::string describe(const value& v) {
        if (is_undefined(v)) return "an undefined value";
        if (v.is_null()) return "none";
        if (v.is_string()) return "the string " + detail::python_string_repr(v.get<std::string>());
        if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
        if (v.is_number()) return "the number " + detail::python_number(v);
        return v.is_array() ? "a list" : "a mapping";
    }

    // ---- expressions ----

    value eval(const expr& e) {
        step(e.pos);
        return checked(eval_unchecked(e), e.pos);
    }

    value eval_unchecked(const expr& e) {
        switch (e.type) {
            case expr::kind::literal: return e.value;
            case expr::kind::name: {
                const value* v = find(e.name);
                return v ? *v : undefined();
            }
            case expr::kind::attribute: {
                const value target = eval(*e.args[0]);
                if (is_undefined(target)) fail(e.pos, "'." + e.name + "' of an undefined value", "check that the name before it is defined");
                if (target.is_object())
                    if (auto it = target.find(e.name); it != target.end()) return *it;
                return undefined();
            }
            case expr::kind::subscript: return subscript(e, eval(*e.args[0]), eval(*e.args[1]));
            case expr::kind::slice: return slice(e);
            case expr::kind::call: return call(e);
            case expr::kind::filter: return filter(e);
            case expr::kind::test: return test(e) != e.negated;
            case expr::kind::unary: {
                const value v = eval(*e.args[0]);
                if (e.name == "not") return !truthy(v);
                if (!v.is_number() || v.is_boolean()) fail(e.pos, "unary " + e.name + " of " + describe(v), "apply it to a number");
                if (e.name == "+") return v;
                return v.is_number_float() ? value(-v.get<double>()) : value(-v.get<std::int64_t>());
            }
            case expr::kind::binary: return binary(e);
            case expr::kind::conditional:
                if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
                return e.args[2] ? eval(*e.args[2]) : undefined();
            case expr::kind::list: {
                value out = value::array();
                for (const expr_ptr& a : e.args) out.push_back(eval(*a));
                return out;
            }
            case expr::kind::dict: {
                value out = value::object();
                for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
                    const value key = eval(*e.args[i]);
                    if (!key.is_string()) fail(e.args[i]->pos, "a dict key is " + describe(key), "use string keys");
                    out[key.get<std::string>()] = eval(*e.args[i + 1]);
                }
                return out;
            }
        }
        return undefined();
    }

    value subscript(const expr& e, const value& target, const value& index) {
        if (is_undefined(target)) fail(e.pos, "subscript of an undefined value", "check that the name before [ ] is defined");
        if (target.is_object()) {
            if (!index.is_string()) return undefined();
            auto it = target.find(index.get<std::string>());
            return it == target.end() ? undefined() : *it;
        }
        if (!index.is_number_integer()) {
            if (index.is_string() && target.is_array()) return undefined();
            fail(e.pos, "index " + describe(index) + " into " + describe(target), "index lists and strings with integers");
        }
        if (target.is_array() || target.is_string()) {
            const value items = target.is_array() ? target : iterate(target, e.pos);
            std::int64_t i = index.get<std::int64_t>();
            const auto n = static_cast<std::int64_t>(items.size());
            if (i < 0) i += n;
            if (i < 0 || i >= n) return undefined();
            return items[static_cast<std::size_t>(i)];
        }
        fail(e.pos, "subscript of " + describe(target), "subscript lists, strings and mappings");
    }

    value slice(const expr& e) {
        const value target = eval(*e.args[0]);
        value bounds[3];
        for (int k = 0; k < 3; ++k) {
            bounds[k] = e.args[1 + k] ? eval(*e.args[1 + k]) : value(nullptr);
            if (!bounds[k].is_null() && !bounds[k].is_number_integer())
                fail(e.pos, "a slice bound is " + describe(bounds[k]), "slice with integers or leave the bound out");
        }
        const std::int64_t step = bounds[2].is_null() ? 1 : bounds[2].get<std::int64_t>();
        if (step == 0) fail(e.pos, "a slice step of 0", "use a non-zero step");
        if (!target.is_array() && !target.is_string()) fail(e.pos, "slice of " + describe(target), "slice lists and strings");
        const value items = target.is_array() ? target : iterate(target, e.pos);
        value out = value::array();
        for (std::int64_t i : detail::slice_positions(static_cast<std::int64_t>(items.size()), bounds[0], bounds[1], step))
            out.push_back(items[static_cast<std::size_t>(i)]);
        if (!target.is_string()) return out;
        std::string s;
        for (const value& c : out) s += c.get_ref<const std::string&>();
        return s;
    }

    value binary(const expr& e) {
        const std::string& op = e.name;
        const value a = eval(*e.args[0]);
        if (op == "and") return truthy(a) ? eval(*e.args[1]) : a;
        if (op == "or") return truthy(a) ? a : eval(*e.args[1]);
        const value b = eval(*e.args[1]);
        if (op == "==") return equal(a, b);
        if (op == "!=") return !equal(a, b);
        if (op == "in" || op == "not in") return contains(e, b, a) == (op == "in");
        if (op == "~") return detail::python_str(a) + detail::python_str(b);
        if (is_undefined(a) || is_undefined(b))
            fail(e.pos, "'" + op + "' with an undefined value", "check that both operands are defined (is defined)");
        if (op == "<" || op == ">" || op == "<=" || op == ">=") {
            const bool numbers = a.is_number() && b.is_number(), strings = a.is_string() && b.is_string();
            if (!numbers && !strings) fail(e.pos, "'" + op + "' between " + describe(a) + " and " + describe(b), "compare numbers or strings");
            const bool less = a < b, greater = b < a;
            return op == "<" ? less : op == ">" ? greater : op == "<=" ? !greater : !less;
        }
        if (op == "+" && a.is_string() && b.is_string()) return a.get<std::string>() + b.get<std::string>();
        if (op == "+" && a.is_array() && b.is_array()) {
            value out = a;
            for (const value& x : b) out.push_back(x);
            return out;
        }
        if (op == "*" && (a.is_string() || b.is_string()) && (a.is_number_integer() || b.is_number_integer())) {
            const std::string& s = (a.is_string() ? a : b).get_ref<const std::string&>();
            const std::int64_t times = (a.is_string() ? b : a).get<std::int64_t>();
            if (times > 0 && s.size() * static_cast<std::size_t>(std::min<std::int64_t>(times, max_items)) > max_items)
                fail(e.pos, "a string repeated to more than " + std::to_string(max_items) + " bytes", "no chat template needs that");
            std::string out;
            for (std::int64_t k = times; k > 0; --k) out += s;
            return out;
        }
        if (!a.is_number() || !b.is_number() || a.is_boolean() || b.is_boolean())
            fail(e.pos, "'" + op + "' between " + describe(a) + " and " + describe(b),
                 "arithmetic takes numbers; + also joins two strings or two lists, ~ joins anything as text");
        const bool ints = a.is_number_integer() && b.is_number_integer();
        const double x = a.get<double>(), y = b.get<double>();
        if ((op == "/" || op == "//" || op == "%") && y == 0) fail(e.pos, "division by zero", "check the divisor");
        if (op == "+") return ints ? value(a.get<std::int64_t>() + b.get<std::int64_t>()) : value(x + y);
        if (op == "-") return ints ? value(a.get<std::int64_t>() - b.get<std::int64_t>()) : value(x - y);
        if (op == "*") return ints ? value(a.get<std::int64_t>() * b.get<std::int64_t>()) : value(x * y);
        if (op == "/") return x / y;
        if (op == "//") return ints ? value(static_cast<std::int64_t>(std::floor(x / y))) : value(std::floor(x / y));
        if (op == "%") {
            const double m = x - y * std::floor(x / y);  // Python's sign: the divisor's
            return ints ? value(static_cast<std::int64_t>(m)) : value(m);
        }
        return ints && y >= 0 ? value(static_cast<std::int64_t>(std::pow(x, y))) : value(std::pow(x, y));  // **
    }

    static bool equal(const value& a, const value& b) {
        if (is_undefined(a) || is_undefined(b)) return is_undefined(a) && is_undefined(b);
        return a == b;
    }

    bool contains(const expr& e, const value& haystack, const value& needle) const {
        if (haystack.is_string()) {
            if (!needle.is_string()) fail(e.pos, "'in <string>' needs a string on the left, got " + describe(needle), "test a string");
            return haystack.get_ref<const std::string&>().find(needle.get_ref<const std::string&>()) != std::string::npos;
        }
        if (haystack.is_array()) {
            for (const value& x : haystack)
                if (equal(x, needle)) return true;
            return false;
        }
        if (haystack.is_object()) return needle.is_string() && haystack.contains(needle.get<std::string>());
        fail(e.pos, "'in' " + describe(haystack), "test membership in a list, a mapping or a string");
    }

    std::vector<value> arguments(const expr& e, std::size_t first) {
        std::vector<value> out;
        for (std::size_t i = first; i < e.args.size(); ++i) out.push_back(eval(*e.args[i]));
        return out;
    }
    value keyword(const expr& e, std::string_view key, const std::vector<value>& positional, std::size_t index,
                  value fallback) {
        for (const auto& [k, v] : e.kwargs)
            if (k == key) return eval(*v);
        return index < positional.size() ? positional[index] : fallback;
    }

    value call(const expr& e);
    value method(const expr& e, const value& target, const std::string& name);
    value filter(const expr& e);
    value apply_filter(const expr& e, const std::string& name, const value& v, const std::vector<value>& args);
    bool test(const expr& e);
    bool apply_test(const expr& e, const std::string& name, const value& v, const std::vector<value>& args);
    value select(const expr& e, const value& v, const std::vector<value>& args, bool by_attribute, bool keep);

    std::string_view m_src, m_name;
    render_limits m_limits;
    std::int64_t m_steps = 0;
    std::vector<value> m_scopes;
    int m_loop_depth = 0;
};

inline std::string compiled_template::render(const value& variables, const render_limits& limits) const {
    return evaluator(m_program->source, m_program->name, variables, limits).render(m_program->tree);
}

}  // namespace strata::jinja

#define STRATA_JINJA_EVALUATOR_DECLARED
#include <strata/text/jinja_builtins.hpp>  // evaluator::call, method, filter, test
