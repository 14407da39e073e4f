"""Knowledge distillation in the style of the PyTorch knowledge-distillation tutorial: a frozen
teacher (teacher.eval(), requires_grad_(False), its forward under torch.no_grad()) and a
student trained on soft targets (KL divergence at temperature T) plus the hard labels; guards
that the student is the root model (its parameters, its tokens), that the teacher's
evaluation is not training time or tokens, and that the counted step includes the teacher's
forward, run before the student's (executed work)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, B, T, STEPS, TEMP = 40, 4, 10, 10, 2.0


class LM(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.emb = nn.Embedding(V, width)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, V))

    def forward(self, idx):
        return self.mlp(self.emb(idx))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(11)
teacher = LM(32, 128)  # larger than the student: the root must still be the student
teacher.eval()
teacher.requires_grad_(False)
student = LM(16, 32)
optimizer = torch.optim.Adam(student.parameters(), lr=5e-3)
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    x = torch.randint(0, V, (B, T), generator=gen)
    labels = x.roll(-1, dims=1)
    with torch.no_grad():
        teacher_logits = teacher(x)
    student_logits = student(x)
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    soft_targets = F.softmax(teacher_logits / TEMP, dim=-1)
    soft_prob = F.log_softmax(student_logits / TEMP, dim=-1)
    kd = F.kl_div(soft_prob.view(-1, V), soft_targets.view(-1, V), reduction="batchmean")
    ce = F.cross_entropy(student_logits.view(-1, V), labels.view(-1))
    loss = 0.5 * kd * TEMP**2 + 0.5 * ce
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f} kd {kd.item():.6f} ce {ce.item():.6f}")

zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in student.parameters()),
    losses=losses,
    loss_series="backward_loss",
    # by hand: the teacher's forward, 2 m n a Linear (32 -> 128 -> V); the student's forward
    # and backward, 3 x 2 m n (16 -> 32 -> V; its first Linear's input needs a gradient, for
    # the embedding); the embeddings are lookups, GELU and the losses are not products
    counted_flops=(2 * (32 * 128 + 128 * V) + 3 * 2 * (16 * 32 + 32 * V)) * B * T,
)
