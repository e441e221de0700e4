-- greenroom schema 5: reserved for another branch of issue work (its migration replaces this
-- file when the branches merge; the runner needs versions 1..N without a gap).
SELECT 1;
