-- Reference: the trivial script answering with a table of three numbers,
-- as a decision answers: what Redis's conversion of a table reply costs.
return {1, 2, 3}
