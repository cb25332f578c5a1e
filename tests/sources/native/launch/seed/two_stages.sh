#!/bin/bash
# Two training commands one after another (written for the tests): the first is checked.
for LR in 1e-5 2e-5; do
  python train.py --model_name_or_path tiny-llama --output_dir out-$LR \
      --per_device_train_batch_size 1 --learning_rate $LR --model_max_length 128
done
python train.py --model_name_or_path tiny-llama --output_dir out --model_max_length 128 \
    --per_device_train_batch_size 1
