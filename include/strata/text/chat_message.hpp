// chat_message: one turn of a conversation, as chat records and chat templates carry it.
#pragma once

#include <string>  // std::string

namespace strata {

struct chat_message {
    std::string role;  // "system", "user", "assistant" (the template decides which others it takes)
    std::string content;
};

}  // namespace strata
