// chat_template: a Hugging Face model's chat template (the Jinja `chat_template` of its
// tokenizer_config.json, or a chat_template.jinja file), rendering a conversation to the text the
// model was tuned on, as transformers' apply_chat_template(tokenize=False) does. The Jinja subset
// it understands is listed in text/jinja.hpp.
//
// The template sees: messages (a list of {role, content}), add_generation_prompt, bos_token,
// eos_token (and unk_token, pad_token when the config names them), tools and documents (none).
#pragma once

#include <strata/core/error.hpp>         // strata::error
#include <strata/core/read_file.hpp>     // read_regular_file
#include <strata/text/chat_message.hpp>  // chat_message
#include <strata/text/jinja.hpp>         // jinja::compiled_template, jinja::value

#include <nlohmann/json.hpp>  // nlohmann::json

#include <filesystem>   // std::filesystem::path
#include <optional>     // std::optional
#include <span>         // std::span
#include <string>       // std::string
#include <utility>      // std::move
#include <vector>       // std::vector

namespace strata {

class chat_template {
public:
    // A template's source; `name` opens its error messages.
    static chat_template from_source(std::string source, std::string bos_token = {}, std::string eos_token = {},
                                     std::string name = "chat template") {
        chat_template t(jinja::compiled_template::parse(std::move(source), name));
        t.m_special["bos_token"] = std::move(bos_token);
        t.m_special["eos_token"] = std::move(eos_token);
        t.m_name = std::move(name);
        return t;
    }

    // A tokenizer_config.json (its chat_template, bos_token and eos_token), a .jinja file (the
    // special tokens then come from the tokenizer_config.json next to it, when there is one), or a
    // model directory (find_in).
    static chat_template load(const std::filesystem::path& file) {
        if (std::error_code ec; std::filesystem::is_directory(file, ec)) {
            if (auto found = find_in(file)) return *found;
            throw error("chat template: " + file.string() + " has no chat_template.jinja and no tokenizer_config.json "
                        "with a chat_template",
                        "pass the file that holds the template");
        }
        if (file.extension() == ".json") return from_config(file, read_text(file));
        std::optional<nlohmann::json> config;
        if (const auto next_to = file.parent_path() / "tokenizer_config.json"; std::filesystem::is_regular_file(next_to))
            config = parse_config(next_to, read_text(next_to));
        chat_template t = from_source(read_text(file), {}, {}, file.string());
        if (config) t.set_special_tokens(*config);
        return t;
    }

    // The template of a model directory: chat_template.jinja, else tokenizer_config.json's
    // chat_template; nothing when neither is there.
    static std::optional<chat_template> find_in(const std::filesystem::path& dir) {
        std::error_code ec;
        if (std::filesystem::is_regular_file(dir / "chat_template.jinja", ec)) return load(dir / "chat_template.jinja");
        const auto config = dir / "tokenizer_config.json";
        if (!std::filesystem::is_regular_file(config, ec)) return std::nullopt;
        const nlohmann::json root = parse_config(config, read_text(config));
        if (!root.contains("chat_template") || root["chat_template"].is_null()) return std::nullopt;
        return from_config(config, root);
    }

    // The conversation as the model sees it; with add_generation_prompt, followed by what opens the
    // assistant's next turn.
    std::string render(std::span<const chat_message> messages, bool add_generation_prompt) const {
        jinja::value variables = m_special;
        jinja::value list = jinja::value::array();
        for (const chat_message& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
        variables["messages"] = std::move(list);
        variables["add_generation_prompt"] = add_generation_prompt;
        variables["tools"] = nullptr;
        variables["documents"] = nullptr;
        return m_template.render(variables);
    }

    // A special token's text, for a template that came without it (a .jinja file alone).
    void set_special_token(const std::string& key, std::string text) { m_special[key] = std::move(text); }

    const std::string& name() const { return m_name; }
    // "NAME (bos_token "<s>", eos_token "</s>")", for a trainer to print.
    std::string summary() const {
        return m_name + " (bos_token \"" + bos_token() + "\", eos_token \"" + eos_token() + "\")";
    }
    std::string bos_token() const { return special("bos_token"); }
    std::string eos_token() const { return special("eos_token"); }
    const std::string& source() const { return m_template.source(); }

private:
    explicit chat_template(jinja::compiled_template t) : m_template(std::move(t)) {}

    std::string special(const char* key) const {
        const auto it = m_special.find(key);
        return it != m_special.end() && it->is_string() ? it->get<std::string>() : std::string();
    }

    static std::string read_text(const std::filesystem::path& file) {
        return read_regular_file(file, "chat template", "pass a tokenizer_config.json with a chat_template, or a .jinja file");
    }

    static nlohmann::json parse_config(const std::filesystem::path& file, const std::string& text) {
        try {
            nlohmann::json root = nlohmann::json::parse(text);
            if (root.is_object()) return root;
        } catch (const nlohmann::json::exception& e) {
            throw error("chat template: " + file.string() + " is not valid JSON: " + e.what(),
                        "tokenizer_config.json is what transformers' save_pretrained writes");
        }
        throw error("chat template: " + file.string() + " does not hold a JSON object", "pass a tokenizer_config.json");
    }

    static chat_template from_config(const std::filesystem::path& file, const std::string& text) {
        return from_config(file, parse_config(file, text));
    }

    // chat_template is a string, or a list of {name, template} of which "default" is the one
    // apply_chat_template takes without tools.
    static chat_template from_config(const std::filesystem::path& file, const nlohmann::json& root) {
        const auto it = root.find("chat_template");
        if (it == root.end() || it->is_null())
            throw error("chat template: " + file.string() + " has no chat_template",
                        "the model has no chat template: train instruction records without one (no chat template)", {"chat_template"});
        std::string source;
        if (it->is_string()) {
            source = it->get<std::string>();
        } else if (it->is_array()) {
            std::string names;
            for (const auto& entry : *it) {
                if (!entry.is_object() || !entry.contains("name") || !entry.contains("template")) continue;
                if (entry["name"] == "default") source = entry["template"].get<std::string>();
                names += (names.empty() ? "" : ", ") + entry["name"].dump();
            }
            if (source.empty())
                throw error("chat template: " + file.string() + " lists chat templates named " + names + " but none \"default\"",
                            "write the one to use into a .jinja file and give that file as the chat template", {"chat_template"});
        } else {
            throw error("chat template: " + file.string() + ": chat_template is a " + std::string(it->type_name()) +
                            ", expected a string or a list of {name, template}",
                        "check the file");
        }
        chat_template t = from_source(std::move(source), {}, {}, file.string() + " chat_template");
        t.set_special_tokens(root);
        return t;
    }

    // bos_token and friends are strings, or AddedToken objects with a "content".
    void set_special_tokens(const nlohmann::json& config) {
        for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
            const auto it = config.find(key);
            if (it == config.end()) continue;
            if (it->is_string()) m_special[key] = it->get<std::string>();
            else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
                m_special[key] = (*it)["content"].get<std::string>();
            else if (it->is_null()) m_special[key] = nullptr;
        }
    }

    jinja::compiled_template m_template;
    jinja::value m_special = jinja::value::object();
    std::string m_name;
};

}  // namespace strata
