# transformers' run_clm.py (published/transformers_clm) on the tests' tiny Llama, run from
# tests/sources/native/launch/: a training file run_clm.py does not load.
python published/transformers_clm/run_clm.py \
    --model_name_or_path seed/tiny-llama \
    --train_file data/corpus.parquet \
    --do_train --output_dir out \
    --per_device_train_batch_size 4 --block_size 1024
