"""Training: data, tokenizer, the shared loop and its stages (base, sft, dpo), nanochat import."""
