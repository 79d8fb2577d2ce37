"""What the local model may emit: the token masks applied at every decoding step (the tool-call
grammar, grounded paths and spans, prose limits, the loop guard, copy bias) and the vocabulary
trie they walk."""
