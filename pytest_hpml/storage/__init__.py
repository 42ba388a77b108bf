"""Every file pytest-hpml reads or writes goes through here: one reader (:mod:`.reader`) and one
writer (:mod:`.writer`), so that every input is checked and every output is safe in one place
(Note [Files])."""
