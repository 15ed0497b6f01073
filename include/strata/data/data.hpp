// The training data pipeline: records -> token sequences -> batches. Includes only.
#pragma once

#include <strata/data/chat.hpp>      // render_for_training, tokenize_conversation, conversation_of
#include <strata/data/dataset.hpp>   // token_dataset, ignore_index, split_dataset, validation_count
#include <strata/data/loader.hpp>    // batch_loader, loader_cursor, make_train_loader, make_validation_loader
#include <strata/data/prompt.hpp>    // prompt_template, alpaca_prompt
#include <strata/data/records.hpp>   // read_records, parse_records, record_set, record_format
#include <strata/data/shuffle.hpp>   // shuffle_rng, epoch_order
#include <strata/data/tokenize.hpp>  // prepare_data, load_data, data_options, data_stats, build_chat_rows
