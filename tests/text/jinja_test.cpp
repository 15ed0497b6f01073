// The Jinja subset of chat templates (strata/text/jinja.hpp), construct by construct, with the
// whitespace rules of transformers' environment (trim_blocks, lstrip_blocks), and the refusals:
// what is outside the subset is a strata::error naming the construct and its line:column.
#include <strata/text/jinja.hpp>  // strata::jinja::compiled_template

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <string>  // std::string

namespace jinja_test {  // this file's names: an area's files compile as one unit (unity build)

using strata::jinja::compiled_template;
using strata::jinja::value;

namespace {

std::string render(const std::string& source, const value& variables = value::object()) {
    return compiled_template::parse(source, "t").render(variables);
}

std::string error_of(const std::string& source, const value& variables = value::object()) {
    try {
        render(source, variables);
    } catch (const strata::error& e) {
        return e.what();
    }
    return "no error";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("jinja: text, output, literals and comments") {
    CHECK(render("plain text") == "plain text");
    CHECK(render("a{{ 'b' }}c{# gone #}d") == "abcd");
    CHECK(render("{{ \"q\\\"\\n\\t\\\\\" }}") == "q\"\n\t\\");
    CHECK(render("{{ '\\u00e9\\x41' }}") == "\xC3\xA9" "A");
    CHECK(render("{{ 'a' 'b' }}") == "ab");
    CHECK(render("{{ 42 }} {{ -7 }} {{ 2.5 }} {{ 1_000 }} {{ 1e3 }} {{ 2.5E-1 }} {{ 0.1 + 0.2 }} {{ 1e20 * 10 }}") ==
          "42 -7 2.5 1000 1000.0 0.25 0.30000000000000004 1e+21");
    CHECK(render("{{ true }} {{ false }} {{ none }} {{ True }}") == "True False None True");
    CHECK(render("{{ [1, 'a'] }} {{ {'k': 'v'} }}") == "[1, 'a'] {'k': 'v'}");
    CHECK(render("{{ x }}|{{ x.y is defined }}", value{{"x", value::object()}}) == "{}|False");
    CHECK(render("{{ undefined_name }}") == "");
    CHECK(render("a\n") == "a");  // the template's one trailing newline is dropped
}

TEST_CASE("jinja: whitespace control, trim_blocks and lstrip_blocks") {
    CHECK(render("a  {{- 'b' -}}  \n c") == "abc");
    CHECK(render("a\n  {%- if true -%}\n  b  {%- endif %}") == "ab");
    // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it
    CHECK(render("{% if true %}\nyes\n{% endif %}\nafter") == "yes\nafter");
    CHECK(render("x\n    {% if true %}\n    y\n    {% endif %}\n") == "x\n    y\n");
    CHECK(render("{# c #}\nline") == "line");
    CHECK(render("a {{ 'b' }}\nc") == "a b\nc");  // not after {{ }}
    CHECK(render("  {%+ if true %}x{% endif %}") == "  x");
}

TEST_CASE("jinja: if, elif, else") {
    const std::string t = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
    CHECK(render(t, value{{"n", 1}}) == "one");
    CHECK(render(t, value{{"n", 2}}) == "two");
    CHECK(render(t, value{{"n", 5}}) == "many");
    CHECK(render("{% if x %}y{% endif %}") == "");
    CHECK(render("{{ 'a' if 1 > 2 else 'b' }}") == "b");
}

TEST_CASE("jinja: for loops, loop variables, filters on loops, else, break and continue") {
    const value v{{"xs", {"a", "b", "c"}}};
    CHECK(render("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ x }}{% if loop.first %}F{% endif %}"
                 "{% if loop.last %}L{{ loop.length }}{% endif %},{% endfor %}", v) == "01aF,12b,23cL3,");
    CHECK(render("{% for x in xs if x != 'b' %}{{ x }}{{ loop.length }}{% endfor %}", v) == "a2c2");
    CHECK(render("{% for x in [] %}x{% else %}empty{% endfor %}") == "empty");
    CHECK(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", value{{"d", {{"z", 1}, {"a", 2}}}}) == "z=1;a=2;");
    CHECK(render("{% for k, v in d | items %}{{ k }}{% endfor %}", value{{"d", {{"z", 1}}}}) == "z");
    CHECK(render("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{% if x == 'c' %}{% break %}{% endif %}{{ x }}{% endfor %}", v) == "a");
    CHECK(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}") == "[h][\xC3\xA9]");
    CHECK(render("{% for i in range(3) %}{{ i }}{% endfor %}") == "012");
}

TEST_CASE("jinja: set, scoping and namespace") {
    CHECK(render("{% set x = 'a' ~ 1 %}{{ x }}") == "a1");
    // a set inside a loop does not leak out of it; a namespace carries values out
    CHECK(render("{% set n = 0 %}{% for i in [1, 2] %}{% set n = n + i %}{% endfor %}{{ n }}") == "0");
    CHECK(render("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") == "3");
    CHECK(render("{% set ns = namespace() %}{% set ns.found = true %}{{ ns.found }}") == "True");
    CHECK(render("{% set b %}in {{ 'block' }}{% endset %}[{{ b }}]") == "[in block]");
    CHECK(render("{% set messages = messages[1:] %}{{ messages | length }}", value{{"messages", {1, 2, 3}}}) == "2");
}

TEST_CASE("jinja: operators") {
    CHECK(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 }} {{ 7 - 10 }}") == "7 3 2 3.5 8 -3");
    CHECK(render("{{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }}") == "ab a1None abab [1, 2]");
    CHECK(render("{{ 1 == 1 }} {{ 'a' != 'b' }} {{ 2 < 1 }} {{ 'a' <= 'b' }} {{ 3 >= 3 }} {{ 3 > 4 }}") ==
          "True True False True True False");
    CHECK(render("{{ true and 'x' }} {{ false or 'y' }} {{ not 0 }} {{ not (1 and 0) }}") == "x y True True");
    CHECK(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}") ==
          "True True True True");
    CHECK(render("{{ 1 ~ 2 * 3 }}") == "16");  // * binds tighter than ~, ~ tighter than +
    CHECK(contains(error_of("{{ 1 + 2 ~ 3 }}"), "'+' between the number 1 and the string '23'"));
}

TEST_CASE("jinja: tests") {
    const value v{{"s", "x"}, {"n", nullptr}, {"m", {{"a", 1}}}, {"l", {1}}, {"t", true}};
    CHECK(render("{{ s is defined }}{{ q is undefined }}{{ n is none }}{{ s is string }}{{ m is mapping }}", v) ==
          "TrueTrueTrueTrueTrue");
    CHECK(render("{{ l is iterable }}{{ s is iterable }}{{ n is iterable }}{{ t is true }}{{ t is false }}", v) ==
          "TrueTrueFalseTrueFalse");
    CHECK(render("{{ n is not none }}{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is number }}", v) ==
          "FalseTrueTrueTrueTrue");
    CHECK(render("{{ s is equalto 'x' }}{{ s is eq('y') }}{{ not s is defined }}", v) == "TrueFalseFalse");
}

TEST_CASE("jinja: member access, subscripts and slices") {
    const value v{{"m", {{"role", "user"}, {"content", "hi"}}}, {"xs", {"a", "b", "c", "d"}}};
    CHECK(render("{{ m.role }} {{ m['content'] }} {{ m.missing is defined }}", v) == "user hi False");
    CHECK(render("{{ xs[0] }}{{ xs[-1] }}{{ xs[1:3] }}{{ xs[:-1] }}{{ xs[::2] }}{{ xs[::-1] }}", v) ==
          "ad['b', 'c']['a', 'b', 'c']['a', 'c']['d', 'c', 'b', 'a']");
    CHECK(render("{{ 'hello'[1:] }}|{{ 'hello'[-1] }}|{{ 'hello'[:-1] }}") == "ello|o|hell");
    CHECK(render("{{ xs[9] is defined }}", v) == "False");
}

TEST_CASE("jinja: filters") {
    CHECK(render("[{{ '  a b \\n' | trim }}]") == "[a b]");
    CHECK(render("{{ 'abc' | length }} {{ [1, 2] | length }} {{ {'a': 1} | count }} {{ 'hé' | length }}") == "3 2 1 2");
    CHECK(render("{{ 'Ab' | upper }} {{ 'Ab' | lower }} {{ 'ab cd' | capitalize }} {{ 'hello world' | title }}") ==
          "AB ab Ab cd Hello World");
    CHECK(render("{{ x | default('d') }} {{ '' | default('e', true) }} {{ 'v' | d('f') }}") == "d e v");
    CHECK(render("{{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join }}") == "a, b 12");
    CHECK(render("{{ {'a': [1, 'é', none, true], 'b': {'c': 1.5}} | tojson }}") ==
          "{\"a\": [1, \"\xC3\xA9\", null, true], \"b\": {\"c\": 1.5}}");
    CHECK(render("{{ {'a': 1} | tojson(indent=2) }}") == "{\n  \"a\": 1\n}");
    CHECK(render("{{ {'z': 1, 'a': 2} | tojson }} {{ {'z': 1, 'a': 2}.items() | list }}") ==
          "{\"z\": 1, \"a\": 2} [['z', 1], ['a', 2]]");  // insertion order, as Python's dicts (tuples print as lists)
    CHECK(render("{{ 'q\"\\n' | tojson }}") == "\"q\\\"\\n\"");
    CHECK(render("{{ [3, 4] | first }}{{ [3, 4] | last }}{{ 5 | string }}{{ '7' | int + 1 }}{{ [1, 2] | reverse | list }}") ==
          "3458[2, 1]");
    CHECK(render("{{ 'aXbX' | replace('X', '-') }}") == "a-b-");
    const value msgs{{"m", {{{"role", "user"}, {"c", 1}}, {{"role", "assistant"}, {"c", 2}}, {{"role", "user"}, {"c", 3}}}}};
    CHECK(render("{{ m | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}", msgs) == "[1, 3]");
    CHECK(render("{{ m | rejectattr('role', 'equalto', 'user') | list | length }}", msgs) == "1");
    CHECK(render("{{ [1, none, 2] | reject('none') | list }} {{ ['a', 1] | select('string') | list }}") == "[1, 2] ['a']");
}

TEST_CASE("jinja: methods and functions") {
    CHECK(render("[{{ '  x  '.strip() }}][{{ 'xxhixx'.strip('x') }}][{{ ' a'.lstrip() }}][{{ 'a '.rstrip() }}]") ==
          "[x][hi][a][a]");
    CHECK(render("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'ab'.upper() }}") == "TrueTrueAB");
    CHECK(render("{{ ' a  b '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}") ==
          "['a', 'b']['a', 'b', '', 'c']['a', 'b,c']");
    CHECK(render("{{ d.keys() | list }}{{ d.values() | list }}{{ d.get('a') }}{{ d.get('z', 0) }}", value{{"d", {{"a", 1}}}}) ==
          "['a'][1]10");
    CHECK(render("{{ strftime_now('%Y') | length }}") == "4");
}

TEST_CASE("jinja: raise_exception becomes a strata::error carrying the message") {
    const std::string e = error_of("line one\n{{ raise_exception('roles must alternate') }}");
    CHECK(contains(e, "t 2:4: the template raised an exception: roles must alternate"));
}

TEST_CASE("jinja: refusals name the construct and its line:column") {
    CHECK(contains(error_of("{{ x | frobnicate }}"), "t 1:8: unknown filter 'frobnicate'"));
    CHECK(contains(error_of("{{ x | frobnicate }}"), "the supported filters are trim"));
    CHECK(contains(error_of("{{ x is frobbed }}"), "t 1:9: unknown test 'frobbed'"));
    CHECK(contains(error_of("ab\n{% if x %}yes"), "t 2:1: unterminated block: no {% endif %}"));
    CHECK(contains(error_of("{{ x "), "t 1:1: unterminated tag: '{{' without '}}'"));
    CHECK(contains(error_of("{% if x %}a"), "unterminated block"));
    CHECK(contains(error_of("{# open"), "unterminated comment"));
    CHECK(contains(error_of("{{ 'abc }}"), "unterminated string literal"));
    CHECK(contains(error_of("{{ '\\U00110000' }}"), "t 1:4: a string escape names code point 1114112, which UTF-8 cannot hold"));
    CHECK(contains(error_of("{{ '\\ud800' }}"), "which UTF-8 cannot hold"));
    CHECK(contains(error_of("{% macro f() %}{% endmacro %}"), "t 1:1: the statement {% macro %} is not supported"));
    CHECK(contains(error_of("{% endif %}"), "{% endif %} without an open block"));
    CHECK(contains(error_of("{{ frob(1) }}"), "t 1:4: unknown function 'frob'"));
    CHECK(contains(error_of("{{ 'a'.frob() }}"), "unknown method 'frob' of the string 'a'"));
    CHECK(contains(error_of("{{ x + 1 }}"), "t 1:6: '+' with an undefined value"));
    CHECK(contains(error_of("{{ x.y }}"), "'.y' of an undefined value"));
    CHECK(contains(error_of("{{ 1 + 'a' }}"), "'+' between the number 1 and the string 'a'"));
    CHECK(contains(error_of("{{ 1 / 0 }}"), "division by zero"));
    CHECK(contains(error_of("{% break %}"), "outside a loop"));
    CHECK(contains(error_of("{{ a $ b }}"), "t 1:6: unexpected character '$'"));
    CHECK(contains(error_of("{% set ns.x = 1 %}"), "which is not a namespace"));
}

// A hostile template (a chat template comes with a downloaded model) cannot take all memory or
// time: the output, every value and the steps are bounded, and the error names the line.
TEST_CASE("jinja: a rendering is bounded in bytes and steps, and the error names the line") {
    // `x = x + x` thirty times would be 2^30 bytes (string * was bounded, + was not)
    std::string doubling = "{% set x = 'ab' %}\n";
    for (int i = 0; i < 30; ++i) doubling += "{% set x = x + x %}";
    doubling += "{{ x | length }}";
    std::string e = error_of(doubling);
    CHECK(contains(e, "t 2:"));
    CHECK(contains(e, "a value of more than 67108864 bytes"));
    // a list that doubles, and a value nested in itself, likewise (a smaller bound: quicker)
    std::string lists = "{% set x = [1, 2] %}", nested = "{% set x = ['ab'] %}";
    for (int i = 0; i < 30; ++i) lists += "{% set x = x + x %}";
    for (int i = 0; i < 40; ++i) nested += "{% set x = [x, x] %}";
    for (const std::string& source : {lists, nested}) {
        try {
            compiled_template::parse(source, "t").render(value::object(), {.max_bytes = 1 << 20});
            FAIL("a value doubled thirty times rendered");
        } catch (const strata::error& error) {
            CHECK(contains(error.what(), "t 1:"));
            CHECK(contains(error.what(), "a value of more than 1048576 bytes"));
        }
    }
    // output that grows without end, each piece small (a smaller bound: quicker)
    try {
        compiled_template::parse("{% for i in range(50000) %}\n{{ 'many bytes ' * 1000 }}{% endfor %}", "t")
            .render(value::object(), {.max_bytes = 1 << 20});
        FAIL("550 MB of output rendered");
    } catch (const strata::error& error) {
        CHECK(contains(error.what(), "t 2:1: output of more than 1048576 bytes"));
    }
    // strings that builtins build from small pieces: each checked before or while it is built
    const auto refused_at_1mib = [](const std::string& source) {
        try {
            return compiled_template::parse(source, "t").render(value::object(), {.max_bytes = 1 << 20});
        } catch (const strata::error& error) {
            return std::string(error.what());
        }
    };
    const std::string wide = "{% set w = 'x' * 500000 %}";
    CHECK(contains(refused_at_1mib(wide + "{{ range(1000) | join(w) | length }}"), "join's string of more than"));
    CHECK(contains(refused_at_1mib(wide + "{{ ('a' * 1000).replace('a', w) | length }}"), "replace()'s string of more than"));
    CHECK(contains(refused_at_1mib("{{ [[1, [2, [3]]]] | tojson(indent=1000000000) }}"), "tojson's text of more than"));
    CHECK(refused_at_1mib(wide + "{{ (range(3) | join(w) | length) + ('ab'.replace('a', w) | length) }}") == "1500004");
    CHECK(render("{{ [1, [2]] | tojson(indent=2) }}") == "[\n  1,\n  [\n    2\n  ]\n]");
    // nested loops of 10^10 iterations (hours without a bound): stopped at the step bound,
    // here a small one to keep the test fast, and the default one is there too
    const std::string loops = "a\n{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    try {
        compiled_template::parse(loops, "t").render(value::object(), {.max_steps = 20000});
        FAIL("nested loops of 10^10 iterations finished");
    } catch (const strata::error& error) {
        CHECK(contains(error.what(), "t 2:"));
        CHECK(contains(error.what(), "more than 20000 steps"));
    }
    CHECK(strata::jinja::render_limits{}.max_steps <= 4'000'000);  // seconds, not minutes
    // loops with empty bodies count too
    try {
        compiled_template::parse("{% for i in range(1000) %}{% endfor %}", "t").render(value::object(), {.max_steps = 500});
        FAIL("1000 loop iterations within 500 steps");
    } catch (const strata::error& error) {
        CHECK(contains(error.what(), "more than 500 steps"));
    }
    // range() stays within the value bound
    CHECK(contains(error_of("{% for i in range(16000000) %}{% endfor %}"), "range() of more than"));
    // a template within the bounds renders as before
    CHECK(render("{% for i in range(3) %}{{ i }}{% endfor %}", value::object()) == "012");
}

}  // namespace jinja_test
