// The Jinja subset of chat templates, first half: the lexer and the parser, from template source
// to a tree (jinja::node, jinja::expr). text/jinja.hpp evaluates the tree; its header comment
// lists the subset. Whitespace follows what transformers' apply_chat_template configures:
// trim_blocks and lstrip_blocks on, the template's one trailing newline dropped, and the `-`
// markers (`{%-`, `-%}`, `{{-`, `-}}`, `{#-`, `-#}`) stripping all whitespace on their side.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <nlohmann/json.hpp>  // nlohmann::json (literals)

#include <algorithm>    // std::min
#include <cctype>       // std::isxdigit
#include <cstddef>      // std::size_t
#include <initializer_list>  // std::initializer_list
#include <cstdint>      // std::int64_t
#include <memory>       // std::unique_ptr, std::make_unique
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <utility>      // std::move, std::pair
#include <vector>       // std::vector

namespace strata::jinja {

using json = nlohmann::json;

// "3:14" for an offset into the source: where a message points the reader.
inline std::string line_column(std::string_view source, std::size_t offset) {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < offset && i < source.size(); ++i) {
        if (source[i] == '\n') {
            ++line;
            column = 1;
        } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
            ++column;
        }
    }
    return std::to_string(line) + ":" + std::to_string(column);
}

// ---- the tree ----

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct expr {
    enum class kind {
        literal,      // value
        name,         // name
        attribute,    // args[0].name
        subscript,    // args[0][args[1]]
        slice,        // args[0][args[1]:args[2]:args[3]], each bound may be null
        call,         // args[0](args[1..], kwargs)
        filter,       // args[0] | name(args[1..], kwargs)
        test,         // args[0] is [not] name(args[1..])
        unary,        // name ("not", "-", "+") args[0]
        binary,       // args[0] name args[1]: or and == != < > <= >= in "not in" + - ~ * / // % **
        conditional,  // args[0] if args[1] else args[2] (args[2] may be null)
        list,         // [args...] and tuples
        dict,         // {args[0]: args[1], args[2]: args[3], ...}
    };
    kind type;
    std::size_t pos;  // offset in the source, for messages
    json value;
    std::string name;
    std::vector<expr_ptr> args;
    std::vector<std::pair<std::string, expr_ptr>> kwargs;
    bool negated = false;  // `is not`
};

struct node;
using body = std::vector<node>;

struct node {
    enum class kind { text, output, if_chain, for_loop, set, set_block, generation, loop_break, loop_continue };
    kind type;
    std::size_t pos;
    std::string text;                                // text
    expr_ptr value;                                  // output, set's value, for's iterable
    std::vector<std::pair<expr_ptr, body>> branches;  // if / elif ... (a null condition: else)
    std::vector<std::string> targets;                // for's loop variables; set's name
    std::string attribute;                           // `set ns.attribute = ...`
    expr_ptr condition;                              // `for x in xs if condition`
    body children;                                   // for's body, set block's body, generation's body
    body otherwise;                                  // `for ... else`
};

// ---- the lexer ----

struct token {
    enum class kind { text, output_begin, output_end, block_begin, block_end, name, string, integer, number, op, end };
    kind type;
    std::size_t pos;
    std::string text;  // text, name, op, or a string literal's value
    json number;       // integer, number
};

namespace detail {

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
inline bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

class lexer {
public:
    lexer(std::string_view source, std::string_view name) : m_src(source), m_name(name) {}

    std::vector<token> run() {
        bool line_starting = true;  // the text ahead starts a line (lstrip_blocks looks)
        bool strip_next = false;    // the tag before ended in `-`: strip the text's leading whitespace
        while (m_at < m_src.size()) {
            const std::size_t open = find_open(m_at);
            std::string text(m_src.substr(m_at, open - m_at));
            const std::size_t text_pos = m_at;
            if (strip_next) {
                std::size_t k = 0;
                while (k < text.size() && is_space(text[k])) ++k;
                text.erase(0, k);
            }
            if (open < m_src.size()) strip_before_tag(text, open, line_starting);
            if (!text.empty()) m_out.push_back({token::kind::text, text_pos, std::move(text), {}});
            if (open == m_src.size()) break;
            m_at = open;
            const std::size_t tag_end = lex_tag(strip_next);
            line_starting = tag_end > 0 && m_src[tag_end - 1] == '\n';
        }
        m_out.push_back({token::kind::end, m_src.size(), {}, {}});
        return std::move(m_out);
    }

private:
    [[noreturn]] void fail(std::size_t pos, const std::string& what, const std::string& hint) const {
        throw error(std::string(m_name) + " " + line_column(m_src, pos) + ": " + what, hint);
    }

    std::size_t find_open(std::size_t from) const {
        for (std::size_t i = from; i + 1 < m_src.size(); ++i)
            if (m_src[i] == '{' && (m_src[i + 1] == '{' || m_src[i + 1] == '%' || m_src[i + 1] == '#')) return i;
        return m_src.size();
    }

    // `{%-`: all whitespace before goes; `{%` and `{#` (lstrip_blocks): spaces and tabs between
    // the line's start and the tag go.
    void strip_before_tag(std::string& text, std::size_t open, bool line_starting) const {
        const char kind = m_src[open + 1];
        const char marker = open + 2 < m_src.size() ? m_src[open + 2] : '\0';
        if (marker == '-') {
            while (!text.empty() && is_space(text.back())) text.pop_back();
            return;
        }
        if (kind == '{' || marker == '+') return;
        const std::size_t line_start = text.rfind('\n');
        const std::size_t from = line_start == std::string::npos ? 0 : line_start + 1;
        if (line_start == std::string::npos && !line_starting) return;
        for (std::size_t k = from; k < text.size(); ++k)
            if (!is_space(text[k])) return;
        text.erase(from);
    }

    // Lexes the tag at m_at; returns the offset after it (and the newline trim_blocks takes).
    std::size_t lex_tag(bool& strip_next) {
        const char kind = m_src[m_at + 1];
        const std::size_t open = m_at;
        m_at += 2;
        if (m_at < m_src.size() && (m_src[m_at] == '-' || m_src[m_at] == '+')) ++m_at;
        if (kind == '#') {
            const std::size_t close = m_src.find("#}", m_at);
            if (close == std::string_view::npos)
                fail(open, "unterminated comment: '{#' without '#}'", "close the comment with #}");
            strip_next = close > m_at && m_src[close - 1] == '-';
            m_at = close + 2;
            if (!strip_next && m_at < m_src.size() && m_src[m_at] == '\n') ++m_at;  // trim_blocks
            return m_at;
        }
        const bool output = kind == '{';
        m_out.push_back({output ? token::kind::output_begin : token::kind::block_begin, open, {}, {}});
        const std::string_view close = output ? "}}" : "%}";
        int depth = 0;  // open ( [ {: a '}' inside a dict literal does not close the tag
        for (;;) {
            while (m_at < m_src.size() && is_space(m_src[m_at])) ++m_at;
            if (m_at >= m_src.size())
                fail(open, std::string("unterminated tag: '") + (output ? "{{" : "{%") + "' without '" +
                               std::string(close) + "'",
                     "close the tag with " + std::string(close));
            const bool dash = m_src[m_at] == '-' && m_src.substr(m_at + 1, 2) == close;
            if (depth == 0 && (dash || m_src.substr(m_at, 2) == close)) {
                m_out.push_back({output ? token::kind::output_end : token::kind::block_end, m_at, {}, {}});
                m_at += dash ? 3 : 2;
                strip_next = dash;
                if (!dash && !output && m_at < m_src.size() && m_src[m_at] == '\n') ++m_at;  // trim_blocks
                return m_at;
            }
            lex_expression_token();
            const std::string& last = m_out.back().text;
            if (m_out.back().type == token::kind::op && (last == "(" || last == "[" || last == "{")) ++depth;
            if (m_out.back().type == token::kind::op && (last == ")" || last == "]" || last == "}") && depth > 0) --depth;
        }
    }

    void lex_expression_token() {
        const std::size_t pos = m_at;
        const char c = m_src[m_at];
        if (is_name_start(c)) {
            while (m_at < m_src.size() && (is_name_start(m_src[m_at]) || is_digit(m_src[m_at]))) ++m_at;
            m_out.push_back({token::kind::name, pos, std::string(m_src.substr(pos, m_at - pos)), {}});
            return;
        }
        if (is_digit(c)) {
            while (m_at < m_src.size() && (is_digit(m_src[m_at]) || m_src[m_at] == '_')) ++m_at;
            bool real = false;
            if (m_at + 1 < m_src.size() && m_src[m_at] == '.' && is_digit(m_src[m_at + 1])) {
                real = true;
                for (++m_at; m_at < m_src.size() && is_digit(m_src[m_at]);) ++m_at;
            }
            if (m_at < m_src.size() && (m_src[m_at] == 'e' || m_src[m_at] == 'E')) {  // 1e3, 2.5E-4
                std::size_t k = m_at + 1;
                if (k < m_src.size() && (m_src[k] == '+' || m_src[k] == '-')) ++k;
                if (k < m_src.size() && is_digit(m_src[k])) {
                    real = true;
                    for (m_at = k; m_at < m_src.size() && is_digit(m_src[m_at]);) ++m_at;
                }
            }
            std::string digits;
            for (char d : m_src.substr(pos, m_at - pos))
                if (d != '_') digits += d;
            token t{real ? token::kind::number : token::kind::integer, pos, digits, {}};
            try {
                t.number = real ? json(std::stod(digits)) : json(static_cast<std::int64_t>(std::stoll(digits)));
            } catch (const std::exception&) {
                fail(pos, "number " + digits + " is out of range", "write a smaller number");
            }
            m_out.push_back(std::move(t));
            return;
        }
        if (c == '\'' || c == '"') {
            m_out.push_back({token::kind::string, pos, lex_string(), {}});
            return;
        }
        static constexpr std::string_view ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                                   "~",  "<",  ">",  "(",  ")",  "[",  "]", "{", "}", ",", ".",
                                                   ":",  "|",  "="};
        for (std::string_view op : ops)
            if (m_src.substr(m_at, op.size()) == op) {
                m_at += op.size();
                m_out.push_back({token::kind::op, pos, std::string(op), {}});
                return;
            }
        fail(pos, std::string("unexpected character '") + c + "' in a tag",
             "chat templates use names, literals, operators and the {{ }} {% %} {# #} delimiters");
    }

    // A string literal with Python's escapes: \n \t \r \\ \' \" \xHH \uHHHH \UHHHHHHHH; an unknown
    // escape keeps its backslash.
    std::string lex_string() {
        const std::size_t open = m_at;
        const char quote = m_src[m_at++];
        std::string out;
        while (m_at < m_src.size() && m_src[m_at] != quote) {
            char c = m_src[m_at++];
            if (c != '\\' || m_at >= m_src.size()) {
                out += c;
                continue;
            }
            const char e = m_src[m_at++];
            switch (e) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case '0': out += '\0'; break;
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case '\n': break;  // a line continuation
                case 'x': append_code_point(out, hex(2, open)); break;
                case 'u': append_code_point(out, hex(4, open)); break;
                case 'U': append_code_point(out, hex(8, open)); break;
                default: out += '\\'; out += e;
            }
        }
        if (m_at >= m_src.size())
            fail(open, "unterminated string literal", std::string("close the string with ") + quote);
        ++m_at;
        return out;
    }

    unsigned long hex(std::size_t digits, std::size_t open) {
        if (m_at + digits > m_src.size()) fail(open, "truncated \\x, \\u or \\U escape in a string", "write all its hex digits");
        const std::string h(m_src.substr(m_at, digits));
        for (char d : h)
            if (!std::isxdigit(static_cast<unsigned char>(d)))
                fail(open, "bad hex digit in the escape \\" + h, "write the escape's hex digits");
        m_at += digits;
        return std::stoul(h, nullptr, 16);
    }

    static void append_code_point(std::string& out, unsigned long cp) {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }

    std::string_view m_src;
    std::string_view m_name;
    std::size_t m_at = 0;
    std::vector<token> m_out;
};

}  // namespace detail

// ---- the parser ----

// Filters and tests the evaluator knows: the parser refuses others where they are written.
inline constexpr std::string_view known_filters[] = {
    "trim", "length", "count", "tojson", "upper", "lower", "capitalize", "title", "default", "d", "join", "items", "list",
    "first", "last", "string", "int", "float", "replace", "selectattr", "rejectattr", "select", "reject", "map",
    "reverse"};
inline constexpr std::string_view known_tests[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "mapping", "iterable",
    "sequence", "true", "false", "even", "odd", "divisibleby", "equalto", "eq", "ne", "lt", "le", "gt", "ge",
    "lower", "upper", "in", "sameas"};

class parser {
public:
    parser(std::string_view source, std::string name)
        : m_src(source), m_name(std::move(name)), m_tokens(detail::lexer(source, m_name).run()) {}

    body parse() {
        body b = parse_body({});
        if (peek().type != token::kind::end) fail(peek().pos, "unexpected tag", "check the template's block structure");
        return b;
    }

private:
    [[noreturn]] void fail(std::size_t pos, const std::string& what, const std::string& hint) const {
        throw error(m_name + " " + line_column(m_src, pos) + ": " + what, hint);
    }

    const token& peek(std::size_t ahead = 0) const {
        return m_tokens[std::min(m_at + ahead, m_tokens.size() - 1)];
    }
    const token& next() { return m_tokens[std::min(m_at++, m_tokens.size() - 1)]; }
    bool at_op(std::string_view op, std::size_t ahead = 0) const {
        return peek(ahead).type == token::kind::op && peek(ahead).text == op;
    }
    bool at_name(std::string_view name, std::size_t ahead = 0) const {
        return peek(ahead).type == token::kind::name && peek(ahead).text == name;
    }
    void expect_op(std::string_view op) {
        if (!at_op(op)) fail(peek().pos, "expected '" + std::string(op) + "', found " + describe(peek()), "check the tag's syntax");
        ++m_at;
    }
    std::string expect_name() {
        if (peek().type != token::kind::name) fail(peek().pos, "expected a name, found " + describe(peek()), "check the tag's syntax");
        return next().text;
    }
    void expect_block_end(std::string_view tag) {
        if (peek().type != token::kind::block_end)
            fail(peek().pos, "unexpected " + describe(peek()) + " in the {% " + std::string(tag) + " %} tag",
                 "end the tag with %}");
        ++m_at;
    }

    static std::string describe(const token& t) {
        switch (t.type) {
            case token::kind::text: return "text";
            case token::kind::output_begin: return "'{{'";
            case token::kind::output_end: return "'}}'";
            case token::kind::block_begin: return "'{%'";
            case token::kind::block_end: return "'%}'";
            case token::kind::name: return "'" + t.text + "'";
            case token::kind::string: return "a string";
            case token::kind::integer:
            case token::kind::number: return "the number " + t.text;
            case token::kind::op: return "'" + t.text + "'";
            case token::kind::end: return "the end of the template";
        }
        return "?";
    }

    // Statements until a block tag whose keyword is one of `stops` (left unconsumed, at its name).
    body parse_body(std::initializer_list<std::string_view> stops) {
        if (m_open_tags.size() > max_depth) fail(peek().pos, "blocks nested more than " + std::to_string(max_depth) + " deep", "simplify the template");
        body out;
        for (;;) {
            const token& t = peek();
            if (t.type == token::kind::end) {
                if (stops.size() != 0)
                    fail(m_open_tags.empty() ? t.pos : m_open_tags.back(),
                         "unterminated block: no {% " + std::string(*(stops.end() - 1)) + " %} before the end",
                         "close every {% if %} with {% endif %}, {% for %} with {% endfor %}");
                return out;
            }
            if (t.type == token::kind::text) {
                out.push_back({node::kind::text, t.pos, t.text});
                ++m_at;
                continue;
            }
            if (t.type == token::kind::output_begin) {
                ++m_at;
                node n{node::kind::output, t.pos};
                n.value = parse_expression();
                if (peek().type != token::kind::output_end)
                    fail(peek().pos, "unexpected " + describe(peek()) + " in {{ }}", "end the expression with }}");
                ++m_at;
                out.push_back(std::move(n));
                continue;
            }
            // a block tag
            const token& keyword = peek(1);
            if (keyword.type != token::kind::name) fail(keyword.pos, "expected a statement after '{%'", "e.g. {% if x %}");
            for (std::string_view s : stops)
                if (keyword.text == s) {
                    ++m_at;  // at the keyword
                    return out;
                }
            m_at += 2;
            out.push_back(parse_statement(keyword.text, t.pos));
        }
    }

    // `pos` is the tag's '{%'.
    node parse_statement(const std::string& k, std::size_t pos) {
        if (k == "if") return parse_if(pos);
        if (k == "for") return parse_for(pos);
        if (k == "set") return parse_set(pos);
        if (k == "generation") {
            expect_block_end("generation");
            node n{node::kind::generation, pos};
            n.children = parse_block_body(pos, "endgeneration");
            return n;
        }
        if (k == "break" || k == "continue") {
            expect_block_end(k);
            return {k == "break" ? node::kind::loop_break : node::kind::loop_continue, pos};
        }
        if (k == "elif" || k == "else" || k.starts_with("end"))
            fail(pos, "{% " + k + " %} without an open block it could close", "check the nesting of the tags");
        fail(pos, "the statement {% " + k + " %} is not supported",
             "chat templates here may use if/elif/else, for, set, generation, break and continue; macros, "
             "include, import, call and filter blocks are outside the supported subset");
    }

    body parse_block_body(std::size_t open, std::string_view end_tag) {
        m_open_tags.push_back(open);
        body b = parse_body({end_tag});
        m_open_tags.pop_back();
        ++m_at;  // the end keyword
        expect_block_end(end_tag);
        return b;
    }

    node parse_if(std::size_t pos) {
        node n{node::kind::if_chain, pos};
        m_open_tags.push_back(pos);
        expr_ptr condition = parse_expression();
        for (;;) {
            expect_block_end("if");
            body b = parse_body({"elif", "else", "endif"});
            const std::string which = next().text;
            n.branches.emplace_back(std::move(condition), std::move(b));
            if (which == "endif") break;
            if (which == "else") {
                expect_block_end("else");
                n.branches.emplace_back(nullptr, parse_body({"endif"}));
                ++m_at;
                break;
            }
            condition = parse_expression();
        }
        expect_block_end("endif");
        m_open_tags.pop_back();
        return n;
    }

    node parse_for(std::size_t pos) {
        node n{node::kind::for_loop, pos};
        n.targets.push_back(expect_name());
        while (at_op(",")) {
            ++m_at;
            n.targets.push_back(expect_name());
        }
        if (!at_name("in")) fail(peek().pos, "expected 'in' in the {% for %} tag", "write {% for x in xs %}");
        ++m_at;
        n.value = parse_conditional(false);
        if (at_name("if")) {
            ++m_at;
            n.condition = parse_conditional(false);
        }
        if (at_name("recursive")) fail(peek().pos, "recursive loops are not supported", "write the recursion out");
        expect_block_end("for");
        m_open_tags.push_back(pos);
        n.children = parse_body({"else", "endfor"});
        if (next().text == "else") {
            expect_block_end("else");
            n.otherwise = parse_body({"endfor"});
            ++m_at;
        }
        m_open_tags.pop_back();
        expect_block_end("endfor");
        return n;
    }

    node parse_set(std::size_t pos) {
        node n{node::kind::set, pos};
        n.targets.push_back(expect_name());
        if (at_op(".")) {
            ++m_at;
            n.attribute = expect_name();
        }
        if (at_op(","))
            fail(peek().pos, "{% set a, b = ... %} (unpacking) is not supported", "set each name on its own");
        if (peek().type == token::kind::block_end) {  // {% set x %}...{% endset %}
            if (!n.attribute.empty()) fail(pos, "a block set of an attribute is not supported", "set a plain name");
            ++m_at;
            n.type = node::kind::set_block;
            n.children = parse_block_body(pos, "endset");
            return n;
        }
        expect_op("=");
        n.value = parse_expression();
        expect_block_end("set");
        return n;
    }

    // ---- expressions, loosest binding first (Jinja's precedence) ----

    expr_ptr make(expr::kind type, std::size_t pos, std::string name = {}) {
        auto e = std::make_unique<expr>();
        e->type = type;
        e->pos = pos;
        e->name = std::move(name);
        return e;
    }
    expr_ptr binary(std::string op, std::size_t pos, expr_ptr lhs, expr_ptr rhs) {
        expr_ptr e = make(expr::kind::binary, pos, std::move(op));
        e->args.push_back(std::move(lhs));
        e->args.push_back(std::move(rhs));
        return e;
    }

    // A tuple without brackets (`a, b`) is accepted where Jinja accepts one: {{ }} and set.
    expr_ptr parse_expression() {
        expr_ptr first = parse_conditional(true);
        if (!at_op(",")) return first;
        expr_ptr tuple = make(expr::kind::list, first->pos);
        tuple->args.push_back(std::move(first));
        while (at_op(",")) {
            ++m_at;
            tuple->args.push_back(parse_conditional(true));
        }
        return tuple;
    }

    expr_ptr parse_conditional(bool with_condition) {
        expr_ptr value = parse_or();
        while (with_condition && at_name("if")) {
            const std::size_t pos = next().pos;
            expr_ptr e = make(expr::kind::conditional, pos);
            e->args.push_back(std::move(value));
            e->args.push_back(parse_or());
            if (at_name("else")) {
                ++m_at;
                e->args.push_back(parse_conditional(true));
            } else {
                e->args.push_back(nullptr);
            }
            value = std::move(e);
        }
        return value;
    }

    expr_ptr parse_or() {
        expr_ptr lhs = parse_and();
        while (at_name("or")) {
            const std::size_t pos = next().pos;
            lhs = binary("or", pos, std::move(lhs), parse_and());
        }
        return lhs;
    }

    expr_ptr parse_and() {
        expr_ptr lhs = parse_not();
        while (at_name("and")) {
            const std::size_t pos = next().pos;
            lhs = binary("and", pos, std::move(lhs), parse_not());
        }
        return lhs;
    }

    expr_ptr parse_not() {
        if (at_name("not")) {
            expr_ptr e = make(expr::kind::unary, next().pos, "not");
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }

    expr_ptr parse_compare() {
        expr_ptr lhs = parse_additive();
        for (;;) {
            const std::size_t pos = peek().pos;
            std::string op;
            if (peek().type == token::kind::op &&
                (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
                 peek().text == "<=" || peek().text == ">=")) {
                op = next().text;
            } else if (at_name("in")) {
                ++m_at;
                op = "in";
            } else if (at_name("not") && at_name("in", 1)) {
                m_at += 2;
                op = "not in";
            } else {
                return lhs;
            }
            lhs = binary(op, pos, std::move(lhs), parse_additive());
        }
    }

    expr_ptr parse_additive() {
        expr_ptr lhs = parse_concat();
        while (at_op("+") || at_op("-")) {
            const token& t = next();
            lhs = binary(t.text, t.pos, std::move(lhs), parse_concat());
        }
        return lhs;
    }

    expr_ptr parse_concat() {
        expr_ptr lhs = parse_multiplicative();
        while (at_op("~")) {
            const std::size_t pos = next().pos;
            lhs = binary("~", pos, std::move(lhs), parse_multiplicative());
        }
        return lhs;
    }

    expr_ptr parse_multiplicative() {
        expr_ptr lhs = parse_power();
        while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
            const token& t = next();
            lhs = binary(t.text, t.pos, std::move(lhs), parse_power());
        }
        return lhs;
    }

    expr_ptr parse_power() {
        expr_ptr lhs = parse_unary(true);
        while (at_op("**")) {
            const std::size_t pos = next().pos;
            lhs = binary("**", pos, std::move(lhs), parse_unary(true));
        }
        return lhs;
    }

    // Nesting deeper than this is no chat template; refusing it keeps the recursion off the stack's end.
    static constexpr int max_depth = 200;

    expr_ptr parse_unary(bool with_filters) {
        if (++m_depth > max_depth) fail(peek().pos, "expressions nested more than " + std::to_string(max_depth) + " deep", "simplify the expression");
        struct leave {
            int& depth;
            ~leave() { --depth; }
        } guard{m_depth};
        expr_ptr e;
        if (at_op("-") || at_op("+")) {
            const token& t = next();
            e = make(expr::kind::unary, t.pos, t.text);
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        return with_filters ? parse_filters_and_tests(std::move(e)) : std::move(e);
    }

    expr_ptr parse_primary() {
        const token& t = peek();
        switch (t.type) {
            case token::kind::name: {
                ++m_at;
                if (t.text == "true" || t.text == "True") return literal(t.pos, true);
                if (t.text == "false" || t.text == "False") return literal(t.pos, false);
                if (t.text == "none" || t.text == "None") return literal(t.pos, nullptr);
                return make(expr::kind::name, t.pos, t.text);
            }
            case token::kind::string: {
                std::string s;
                while (peek().type == token::kind::string) s += next().text;  // adjacent literals join
                return literal(t.pos, json(std::move(s)));
            }
            case token::kind::integer:
            case token::kind::number: ++m_at; return literal(t.pos, t.number);
            case token::kind::op:
                if (t.text == "(") return parse_parenthesized();
                if (t.text == "[") return parse_sequence(expr::kind::list, "]");
                if (t.text == "{") return parse_sequence(expr::kind::dict, "}");
                break;
            default: break;
        }
        fail(t.pos, "expected an expression, found " + describe(t), "check the expression's syntax");
    }

    expr_ptr literal(std::size_t pos, json value) {
        expr_ptr e = make(expr::kind::literal, pos);
        e->value = std::move(value);
        return e;
    }

    expr_ptr parse_parenthesized() {
        const std::size_t pos = next().pos;
        if (at_op(")")) {
            ++m_at;
            return make(expr::kind::list, pos);  // ()
        }
        expr_ptr e = parse_expression();
        expect_op(")");
        return e;
    }

    // [a, b] or {k: v, ...}
    expr_ptr parse_sequence(expr::kind type, std::string_view close) {
        expr_ptr e = make(type, next().pos);
        while (!at_op(close)) {
            e->args.push_back(parse_conditional(true));
            if (type == expr::kind::dict) {
                expect_op(":");
                e->args.push_back(parse_conditional(true));
            }
            if (!at_op(",")) break;
            ++m_at;
        }
        expect_op(close);
        return e;
    }

    expr_ptr parse_postfix(expr_ptr e) {
        for (;;) {
            if (at_op(".")) {
                const std::size_t pos = next().pos;
                if (peek().type == token::kind::integer) {  // xs.0, Jinja's spelling of xs[0]
                    expr_ptr s = make(expr::kind::subscript, pos);
                    s->args.push_back(std::move(e));
                    s->args.push_back(literal(peek().pos, next().number));
                    e = std::move(s);
                    continue;
                }
                expr_ptr a = make(expr::kind::attribute, pos, expect_name());
                a->args.push_back(std::move(e));
                e = std::move(a);
            } else if (at_op("[")) {
                e = parse_subscript(std::move(e));
            } else if (at_op("(")) {
                expr_ptr c = make(expr::kind::call, e->pos);
                c->args.push_back(std::move(e));
                parse_call_arguments(*c);
                e = std::move(c);
            } else {
                return e;
            }
        }
    }

    expr_ptr parse_subscript(expr_ptr target) {
        const std::size_t pos = next().pos;
        std::vector<expr_ptr> parts(1);
        bool slice = false;
        while (!at_op("]")) {
            if (at_op(":")) {
                ++m_at;
                slice = true;
                parts.emplace_back();
                if (parts.size() > 3) fail(pos, "a slice has at most three parts", "write xs[start:stop:step]");
                continue;
            }
            if (parts.back()) fail(peek().pos, "expected ':' or ']' in a subscript", "write xs[i] or xs[a:b]");
            parts.back() = parse_conditional(true);
        }
        ++m_at;
        expr_ptr e = make(slice ? expr::kind::slice : expr::kind::subscript, pos);
        e->args.push_back(std::move(target));
        if (!slice && !parts[0]) fail(pos, "empty subscript []", "write xs[i]");
        parts.resize(slice ? 3 : 1);
        for (expr_ptr& p : parts) e->args.push_back(std::move(p));
        return e;
    }

    // (a, b, key=value): positional arguments into e.args after what is there, keywords into kwargs.
    void parse_call_arguments(expr& e) {
        expect_op("(");
        while (!at_op(")")) {
            if (peek().type == token::kind::name && at_op("=", 1)) {
                std::string key = next().text;
                ++m_at;
                e.kwargs.emplace_back(std::move(key), parse_conditional(true));
            } else {
                if (!e.kwargs.empty()) fail(peek().pos, "a positional argument after a keyword argument", "put positional arguments first");
                e.args.push_back(parse_conditional(true));
            }
            if (!at_op(",")) break;
            ++m_at;
        }
        expect_op(")");
    }

    expr_ptr parse_filters_and_tests(expr_ptr e) {
        for (;;) {
            if (at_op("|")) {
                ++m_at;
                const std::size_t pos = peek().pos;
                std::string name = expect_name();
                if (!is_known(known_filters, name))
                    fail(pos, "unknown filter '" + name + "'", "the supported filters are " + list_of(known_filters));
                expr_ptr f = make(expr::kind::filter, pos, std::move(name));
                f->args.push_back(std::move(e));
                if (at_op("(")) parse_call_arguments(*f);
                e = std::move(f);
            } else if (at_name("is")) {
                ++m_at;
                bool negated = false;
                if (at_name("not")) {
                    ++m_at;
                    negated = true;
                }
                const std::size_t pos = peek().pos;
                std::string name = peek().type == token::kind::name ? next().text : "";
                if (name.empty() && at_op("==")) name = next().text;
                if (!is_known(known_tests, name) && name != "==")
                    fail(pos, "unknown test '" + name + "'", "the supported tests are " + list_of(known_tests));
                expr_ptr t = make(expr::kind::test, pos, std::move(name));
                t->negated = negated;
                t->args.push_back(std::move(e));
                if (at_op("(")) {
                    parse_call_arguments(*t);
                } else if (starts_test_argument()) {
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else {
                return e;
            }
        }
    }

    // `x is divisibleby 3`, `x is sameas false`: one argument without parentheses.
    bool starts_test_argument() const {
        const token& t = peek();
        if (t.type == token::kind::name)
            return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if" && t.text != "is" &&
                   t.text != "in" && t.text != "not";
        return t.type == token::kind::string || t.type == token::kind::integer || t.type == token::kind::number ||
               (t.type == token::kind::op && (t.text == "[" || t.text == "{"));
    }

    template <std::size_t N>
    static bool is_known(const std::string_view (&names)[N], std::string_view name) {
        for (std::string_view n : names)
            if (n == name) return true;
        return false;
    }
    template <std::size_t N>
    static std::string list_of(const std::string_view (&names)[N]) {
        std::string out;
        for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
        return out;
    }

    std::string_view m_src;
    std::string m_name;
    std::vector<token> m_tokens;
    std::size_t m_at = 0;
    std::vector<std::size_t> m_open_tags;  // the positions of the blocks being parsed, for "unterminated"
    int m_depth = 0;                       // expressions being parsed, one inside the other
};

}  // namespace strata::jinja
