// The Jinja subset of chat templates, second step: the parser, from the lexer's tokens
// (text/jinja_lex.hpp) to a tree (jinja::node, jinja::expr) that text/jinja.hpp evaluates; its
// header comment lists the subset. Constructs outside it are refused here, where they are
// written, with their line:column.
#pragma once

#include <strata/core/error.hpp>      // strata::error
#include <strata/text/jinja_lex.hpp>  // jinja::token, detail::lexer, line_column

#include <algorithm>         // std::min
#include <cstddef>           // std::size_t
#include <initializer_list>  // std::initializer_list
#include <memory>            // std::unique_ptr, std::make_unique
#include <string>            // std::string
#include <string_view>       // std::string_view
#include <utility>           // std::move, std::pair
#include <vector>            // std::vector

namespace strata::jinja {

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

    static node make_node(node::kind type, std::size_t pos) {
        node n;
        n.type = type;
        n.pos = pos;
        return n;
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
                out.push_back(make_node(node::kind::text, t.pos));
                out.back().text = t.text;
                ++m_at;
                continue;
            }
            if (t.type == token::kind::output_begin) {
                ++m_at;
                node n = make_node(node::kind::output, t.pos);
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
            node n = make_node(node::kind::generation, pos);
            n.children = parse_block_body(pos, "endgeneration");
            return n;
        }
        if (k == "break" || k == "continue") {
            expect_block_end(k);
            return make_node(k == "break" ? node::kind::loop_break : node::kind::loop_continue, pos);
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
        node n = make_node(node::kind::if_chain, pos);
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
        node n = make_node(node::kind::for_loop, pos);
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
        node n = make_node(node::kind::set, pos);
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
