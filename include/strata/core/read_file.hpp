// Reading a whole input file (a data set, a chat template, a tokenizer's files) into memory.
//
// Only a regular file: a device (/dev/zero, /dev/urandom), a FIFO or a socket has no end that can
// be known before reading it, and read whole it grows memory without bound (/dev/zero filled
// 2.5 GB in 10 s) or never finishes.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <filesystem>  // std::filesystem::path, status, is_directory, is_regular_file, exists
#include <fstream>     // std::ifstream
#include <iterator>    // std::istreambuf_iterator
#include <string>      // std::string
#include <system_error>  // std::error_code

namespace strata {

// The bytes of `path`, which must be a regular file (or a link to one). `what` names the file in
// errors ("data file", "chat template"); `directory_hint` is the hint when `path` is a directory.
inline std::string read_regular_file(const std::filesystem::path& path, const std::string& what,
                                     const std::string& directory_hint) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);  // follows links
    if (!fs::exists(status)) throw error("cannot open " + what + " " + path.string() + ": it does not exist", "check the path");
    if (fs::is_directory(status)) throw error(what + " " + path.string() + " is a directory", directory_hint);
    if (!fs::is_regular_file(status))
        throw error(what + " " + path.string() +
                        " is not a regular file but a device, pipe or socket, whose end cannot be known before "
                        "reading it (/dev/zero never ends)",
                    "copy what it gives into a file, and pass that file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw error("cannot open " + what + " " + path.string(), "check the file's permissions");
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw error("error while reading " + what + " " + path.string(), "check the disk and the file");
    return content;
}

}  // namespace strata
