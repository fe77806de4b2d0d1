// The x86-64 assembler (drivers/cpu/x86_encode.cpp) byte for byte. Every expected encoding is GNU as 2.40's (`as --64`
// on the Intel-syntax text in the case's comment, after .intel_syntax noprefix), not the assembler's own output.
// tests/test_x86_encode.py checks every form against capstone and against GNU as; this program needs neither, and
// runs under the sanitizers.
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.h"
#include "drivers/cpu/x86_encode.h"

using namespace th::x86;

namespace {

Instr I(std::string mnemonic, std::vector<Operand> ops) { return {std::move(mnemonic), std::move(ops), {}}; }
Mem M(int size, Reg base, Reg index = {}, int scale = 1, int32_t disp = 0) { return {size, base, index, scale, disp, {}}; }
Mem rip_label(int size, std::string label, int32_t disp = 0) { return {size, rip, {}, 1, disp, std::move(label)}; }

std::string hex(const std::vector<uint8_t>& bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (const uint8_t b : bytes) s += {digits[b >> 4], digits[b & 15]};
  return s;
}

std::vector<uint8_t> one(const Instr& in) { return assemble(std::span<const Instr>(&in, 1)).code; }

void test_encodings() {
  struct Case {
    Instr in;
    std::vector<uint8_t> want;
  };
  const std::vector<Case> cases = {
      {I("add", {rax, rbx}), {0x48, 0x01, 0xD8}},  // add rax, rbx
      {I("add", {gpr32(0), Imm{1}}), {0x83, 0xC0, 0x01}},  // add eax, 1
      {I("add", {gpr32(0), Imm{0x1000}}), {0x05, 0x00, 0x10, 0x00, 0x00}},  // add eax, 0x1000
      {I("add", {gpr16(0), Imm{-1}}), {0x66, 0x83, 0xC0, 0xFF}},  // add ax, -1
      {I("sub", {rsp, Imm{0x28}}), {0x48, 0x83, 0xEC, 0x28}},  // sub rsp, 0x28
      {I("and", {r9, Imm{-0x100}}), {0x49, 0x81, 0xE1, 0x00, 0xFF, 0xFF, 0xFF}},  // and r9, -0x100
      {I("cmp", {gpr8(0), Imm{-1}}), {0x3C, 0xFF}},  // cmp al, -1
      {I("xor", {gpr32(8), gpr32(8)}), {0x45, 0x31, 0xC0}},  // xor r8d, r8d
      {I("or", {M(4, rcx, rdx, 4, 0x40), gpr32(15)}), {0x44, 0x09, 0x7C, 0x91, 0x40}},  // or dword ptr [rcx + rdx*4 + 0x40], r15d
      {I("mov", {rax, Imm{1}}), {0x48, 0xC7, 0xC0, 0x01, 0x00, 0x00, 0x00}},  // mov rax, 1
      {I("mov", {gpr32(0), Imm{1}}), {0xB8, 0x01, 0x00, 0x00, 0x00}},  // mov eax, 1
      {I("mov", {rax, Imm{0x123456789}}), {0x48, 0xB8, 0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00, 0x00}},  // mov rax, 0x123456789
      {I("movabs", {r15, Imm{-1}}), {0x49, 0xBF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},  // movabs r15, -1
      {I("mov", {gpr8(6), Imm{1}}), {0x40, 0xB6, 0x01}},  // mov sil, 1
      {I("mov", {M(8, rsp, {}, 1, 8), rax}), {0x48, 0x89, 0x44, 0x24, 0x08}},  // mov qword ptr [rsp + 8], rax
      {I("mov", {gpr32(12), M(4, r13)}), {0x45, 0x8B, 0x65, 0x00}},  // mov r12d, dword ptr [r13]
      {I("mov", {rax, M(8, rbp)}), {0x48, 0x8B, 0x45, 0x00}},  // mov rax, qword ptr [rbp]
      {I("mov", {rax, M(8, r12)}), {0x49, 0x8B, 0x04, 0x24}},  // mov rax, qword ptr [r12]
      {I("mov", {gpr32(0), M(4, {}, rsi, 2, 0x1000)}), {0x8B, 0x04, 0x75, 0x00, 0x10, 0x00, 0x00}},  // mov eax, dword ptr [rsi*2 + 0x1000]
      {I("mov", {gpr32(0), M(4, {}, {}, 1, 0x2000)}), {0x8B, 0x04, 0x25, 0x00, 0x20, 0x00, 0x00}},  // mov eax, dword ptr ds:[0x2000]
      {I("mov", {M(2, r8, r15, 8, -0x80), Imm{0x1234}}), {0x66, 0x43, 0xC7, 0x44, 0xF8, 0x80, 0x34, 0x12}},  // mov word ptr [r8 + r15*8 - 0x80], 0x1234
      {I("mov", {rdx, M(8, rdi, {}, 1, 0x12345)}), {0x48, 0x8B, 0x97, 0x45, 0x23, 0x01, 0x00}},  // mov rdx, qword ptr [rdi + 0x12345]
      {I("lea", {rax, M(0, rip, {}, 1, 0x10)}), {0x48, 0x8D, 0x05, 0x10, 0x00, 0x00, 0x00}},  // lea rax, [rip + 0x10]
      {I("lea", {r13, M(8, rsp, rbp, 8, 0x10)}), {0x4C, 0x8D, 0x6C, 0xEC, 0x10}},  // lea r13, [rsp + rbp*8 + 0x10]
      {I("lea", {rcx, M(8, r9, r12, 1, -4)}), {0x4B, 0x8D, 0x4C, 0x21, 0xFC}},  // lea rcx, [r9 + r12 - 4]
      {I("movzx", {gpr32(0), gpr8(7)}), {0x40, 0x0F, 0xB6, 0xC7}},  // movzx eax, dil
      {I("movzx", {r11, M(2, rax)}), {0x4C, 0x0F, 0xB7, 0x18}},  // movzx r11, word ptr [rax]
      {I("movsx", {rax, gpr8(1)}), {0x48, 0x0F, 0xBE, 0xC1}},  // movsx rax, cl
      {I("movsxd", {rax, gpr32(9)}), {0x49, 0x63, 0xC1}},  // movsxd rax, r9d
      {I("test", {rax, rcx}), {0x48, 0x85, 0xC8}},  // test rax, rcx
      {I("test", {gpr32(0), Imm{1}}), {0xA9, 0x01, 0x00, 0x00, 0x00}},  // test eax, 1
      {I("test", {rax, M(8, rcx)}), {0x48, 0x85, 0x01}},  // test rax, qword ptr [rcx]
      {I("imul", {rax, rbx}), {0x48, 0x0F, 0xAF, 0xC3}},  // imul rax, rbx
      {I("imul", {gpr32(10), M(4, rax), Imm{100}}), {0x44, 0x6B, 0x10, 0x64}},  // imul r10d, dword ptr [rax], 100
      {I("imul", {rcx, rdx, Imm{-8}}), {0x48, 0x6B, 0xCA, 0xF8}},  // imul rcx, rdx, -8
      {I("neg", {r11}), {0x49, 0xF7, 0xDB}},  // neg r11
      {I("not", {M(1, rax)}), {0xF6, 0x10}},  // not byte ptr [rax]
      {I("shl", {gpr32(0), Imm{1}}), {0xD1, 0xE0}},  // shl eax, 1
      {I("shr", {rdx, gpr8(1)}), {0x48, 0xD3, 0xEA}},  // shr rdx, cl
      {I("sar", {gpr32(14), Imm{31}}), {0x41, 0xC1, 0xFE, 0x1F}},  // sar r14d, 31
      {I("cdq", {}), {0x99}},  // cdq
      {I("cqo", {}), {0x48, 0x99}},  // cqo
      {I("idiv", {r10}), {0x49, 0xF7, 0xFA}},  // idiv r10
      {I("div", {gpr32(1)}), {0xF7, 0xF1}},  // div ecx
      {I("sete", {gpr8(8)}), {0x41, 0x0F, 0x94, 0xC0}},  // sete r8b
      {I("setae", {gpr8(5)}), {0x40, 0x0F, 0x93, 0xC5}},  // setae bpl
      {I("cmovl", {rax, M(8, rsp)}), {0x48, 0x0F, 0x4C, 0x04, 0x24}},  // cmovl rax, qword ptr [rsp]
      {I("push", {r12}), {0x41, 0x54}},  // push r12
      {I("pop", {rbx}), {0x5B}},  // pop rbx
      {I("push", {Imm{-1}}), {0x6A, 0xFF}},  // push -1
      {I("call", {r11}), {0x41, 0xFF, 0xD3}},  // call r11
      {I("call", {M(8, rax, {}, 1, 8)}), {0xFF, 0x50, 0x08}},  // call qword ptr [rax + 8]
      {I("jmp", {rax}), {0xFF, 0xE0}},  // jmp rax
      {I("lock xadd", {M(8, rax), rcx}), {0xF0, 0x48, 0x0F, 0xC1, 0x08}},  // lock xadd qword ptr [rax], rcx
      {I("lock add", {M(4, r12, {}, 1, 16), Imm{1}}), {0xF0, 0x41, 0x83, 0x44, 0x24, 0x10, 0x01}},  // lock add dword ptr [r12 + 16], 1
      {I("xchg", {rax, rcx}), {0x48, 0x91}},  // xchg rax, rcx
      {I("xchg", {gpr32(0), gpr32(0)}), {0x87, 0xC0}},  // xchg eax, eax
      {I("mfence", {}), {0x0F, 0xAE, 0xF0}},  // mfence
      {I("sfence", {}), {0x0F, 0xAE, 0xF8}},  // sfence
      {I("nop", {}), {0x90}},  // nop
      {I("int3", {}), {0xCC}},  // int3
      {I("ret", {}), {0xC3}},  // ret
      {I("vaddps", {xmm(0), xmm(1), xmm(2)}), {0xC5, 0xF0, 0x58, 0xC2}},  // vaddps xmm0, xmm1, xmm2
      {I("vaddps", {ymm(15), ymm(9), ymm(14)}), {0xC4, 0x41, 0x34, 0x58, 0xFE}},  // vaddps ymm15, ymm9, ymm14
      {I("vaddps", {xmm(0), xmm(1), xmm(8)}), {0xC4, 0xC1, 0x70, 0x58, 0xC0}},  // vaddps xmm0, xmm1, xmm8
      {I("vmulpd", {ymm(1), ymm(2), M(32, rbx, {}, 1, 0x200)}), {0xC5, 0xED, 0x59, 0x8B, 0x00, 0x02, 0x00, 0x00}},  // vmulpd ymm1, ymm2, ymmword ptr [rbx + 0x200]
      {I("vmovaps", {xmm(0), xmm(8)}), {0xC5, 0x78, 0x29, 0xC0}},  // vmovaps xmm0, xmm8
      {I("vmovups", {ymm(8), ymm(0)}), {0xC5, 0x7C, 0x10, 0xC0}},  // vmovups ymm8, ymm0
      {I("vmovups", {M(32, rsp, {}, 1, 0x40), ymm(3)}), {0xC5, 0xFC, 0x11, 0x5C, 0x24, 0x40}},  // vmovups ymmword ptr [rsp + 0x40], ymm3
      {I("vmovss", {xmm(1), M(4, r13)}), {0xC4, 0xC1, 0x7A, 0x10, 0x4D, 0x00}},  // vmovss xmm1, dword ptr [r13]
      {I("vmovsd", {xmm(0), xmm(1), xmm(8)}), {0xC5, 0x73, 0x11, 0xC0}},  // vmovsd xmm0, xmm1, xmm8
      {I("vfmadd231ps", {ymm(0), ymm(1), M(32, r8, r15, 8, -0x80)}), {0xC4, 0x82, 0x75, 0xB8, 0x44, 0xF8, 0x80}},  // vfmadd231ps ymm0, ymm1, ymmword ptr [r8 + r15*8 - 0x80]
      {I("vfmadd213sd", {xmm(3), xmm(4), xmm(5)}), {0xC4, 0xE2, 0xD9, 0xA9, 0xDD}},  // vfmadd213sd xmm3, xmm4, xmm5
      {I("vblendvps", {ymm(0), ymm(1), ymm(2), ymm(3)}), {0xC4, 0xE3, 0x75, 0x4A, 0xC2, 0x30}},  // vblendvps ymm0, ymm1, ymm2, ymm3
      {I("vpblendvb", {xmm(9), xmm(10), M(16, rax), xmm(12)}), {0xC4, 0x63, 0x29, 0x4C, 0x08, 0xC0}},  // vpblendvb xmm9, xmm10, xmmword ptr [rax], xmm12
      {I("vpslld", {ymm(1), ymm(2), Imm{5}}), {0xC5, 0xF5, 0x72, 0xF2, 0x05}},  // vpslld ymm1, ymm2, 5
      {I("vpsrlq", {xmm(9), xmm(10), Imm{63}}), {0xC4, 0xC1, 0x31, 0x73, 0xD2, 0x3F}},  // vpsrlq xmm9, xmm10, 63
      {I("vpermq", {ymm(0), ymm(1), Imm{0x1b}}), {0xC4, 0xE3, 0xFD, 0x00, 0xC1, 0x1B}},  // vpermq ymm0, ymm1, 0x1b
      {I("vpand", {ymm(0), ymm(1), ymm(2)}), {0xC5, 0xF5, 0xDB, 0xC2}},  // vpand ymm0, ymm1, ymm2
      {I("vpcmpgtd", {xmm(0), xmm(1), xmm(2)}), {0xC5, 0xF1, 0x66, 0xC2}},  // vpcmpgtd xmm0, xmm1, xmm2
      {I("vcmpps", {ymm(0), ymm(1), ymm(2), Imm{1}}), {0xC5, 0xF4, 0xC2, 0xC2, 0x01}},  // vcmpps ymm0, ymm1, ymm2, 1
      {I("vcvtsi2sd", {xmm(0), xmm(1), rax}), {0xC4, 0xE1, 0xF3, 0x2A, 0xC0}},  // vcvtsi2sd xmm0, xmm1, rax
      {I("vcvtsi2ss", {xmm(0), xmm(1), M(4, rax)}), {0xC5, 0xF2, 0x2A, 0x00}},  // vcvtsi2ss xmm0, xmm1, dword ptr [rax]
      {I("vcvttss2si", {r9, xmm(3)}), {0xC4, 0x61, 0xFA, 0x2C, 0xCB}},  // vcvttss2si r9, xmm3
      {I("vcvttsd2si", {gpr32(0), xmm(12)}), {0xC4, 0xC1, 0x7B, 0x2C, 0xC4}},  // vcvttsd2si eax, xmm12
      {I("vcvtps2pd", {ymm(0), xmm(1)}), {0xC5, 0xFC, 0x5A, 0xC1}},  // vcvtps2pd ymm0, xmm1
      {I("vcvtpd2ps", {xmm(0), M(32, rax)}), {0xC5, 0xFD, 0x5A, 0x00}},  // vcvtpd2ps xmm0, ymmword ptr [rax]
      {I("vcvtph2ps", {ymm(0), M(16, rdi)}), {0xC4, 0xE2, 0x7D, 0x13, 0x07}},  // vcvtph2ps ymm0, xmmword ptr [rdi]
      {I("vcvtps2ph", {M(16, rdi), ymm(2), Imm{4}}), {0xC4, 0xE3, 0x7D, 0x1D, 0x17, 0x04}},  // vcvtps2ph xmmword ptr [rdi], ymm2, 4
      {I("vroundps", {ymm(0), ymm(1), Imm{9}}), {0xC4, 0xE3, 0x7D, 0x08, 0xC1, 0x09}},  // vroundps ymm0, ymm1, 9
      {I("vextractf128", {xmm(1), ymm(2), Imm{1}}), {0xC4, 0xE3, 0x7D, 0x19, 0xD1, 0x01}},  // vextractf128 xmm1, ymm2, 1
      {I("vinserti128", {ymm(1), ymm(2), M(16, rax), Imm{1}}), {0xC4, 0xE3, 0x6D, 0x38, 0x08, 0x01}},  // vinserti128 ymm1, ymm2, xmmword ptr [rax], 1
      {I("vpextrd", {gpr32(0), xmm(1), Imm{3}}), {0xC4, 0xE3, 0x79, 0x16, 0xC8, 0x03}},  // vpextrd eax, xmm1, 3
      {I("vpinsrq", {xmm(1), xmm(2), r10, Imm{1}}), {0xC4, 0xC3, 0xE9, 0x22, 0xCA, 0x01}},  // vpinsrq xmm1, xmm2, r10, 1
      {I("vpextrw", {gpr32(0), xmm(1), Imm{3}}), {0xC5, 0xF9, 0xC5, 0xC1, 0x03}},  // vpextrw eax, xmm1, 3
      {I("vmovmskps", {gpr32(0), ymm(1)}), {0xC5, 0xFC, 0x50, 0xC1}},  // vmovmskps eax, ymm1
      {I("vbroadcastss", {ymm(0), M(4, rip, {}, 1, 0x100)}), {0xC4, 0xE2, 0x7D, 0x18, 0x05, 0x00, 0x01, 0x00, 0x00}},  // vbroadcastss ymm0, dword ptr [rip + 0x100]
      {I("vpbroadcastd", {ymm(0), xmm(1)}), {0xC4, 0xE2, 0x7D, 0x58, 0xC1}},  // vpbroadcastd ymm0, xmm1
      {I("vmovq", {xmm(0), rax}), {0xC4, 0xE1, 0xF9, 0x6E, 0xC0}},  // vmovq xmm0, rax
      {I("vmovq", {xmm(0), M(8, rax)}), {0xC5, 0xFA, 0x7E, 0x00}},  // vmovq xmm0, qword ptr [rax]
      {I("vmovd", {M(4, rax), xmm(1)}), {0xC5, 0xF9, 0x7E, 0x08}},  // vmovd dword ptr [rax], xmm1
      {I("vucomiss", {xmm(0), xmm(1)}), {0xC5, 0xF8, 0x2E, 0xC1}},  // vucomiss xmm0, xmm1
      {I("vzeroupper", {}), {0xC5, 0xF8, 0x77}},  // vzeroupper
      {I("kmovw", {kreg(1), gpr32(0)}), {0xC5, 0xF8, 0x92, 0xC8}},  // kmovw k1, eax
      {I("kmovq", {rax, kreg(2)}), {0xC4, 0xE1, 0xFB, 0x93, 0xC2}},  // kmovq rax, k2
      {I("kmovd", {kreg(3), M(4, rsp)}), {0xC4, 0xE1, 0xF9, 0x90, 0x1C, 0x24}},  // kmovd k3, dword ptr [rsp]
      {I("kandw", {kreg(1), kreg(2), kreg(3)}), {0xC5, 0xEC, 0x41, 0xCB}},  // kandw k1, k2, k3
      {I("kortestw", {kreg(1), kreg(1)}), {0xC5, 0xF8, 0x98, 0xC9}},  // kortestw k1, k1
      {I("kshiftrw", {kreg(1), kreg(2), Imm{8}}), {0xC4, 0xE3, 0xF9, 0x30, 0xCA, 0x08}},  // kshiftrw k1, k2, 8
      {I("knotb", {kreg(4), kreg(5)}), {0xC5, 0xF9, 0x44, 0xE5}},  // knotb k4, k5
      {I("vaddps", {zmm(1), zmm(2), zmm(3), Mask{kreg(1), true}}), {0x62, 0xF1, 0x6C, 0xC9, 0x58, 0xCB}},  // vaddps zmm1{k1}{z}, zmm2, zmm3
      {I("vaddps", {xmm(16), xmm(1), xmm(2)}), {0x62, 0xE1, 0x74, 0x08, 0x58, 0xC2}},  // vaddps xmm16, xmm1, xmm2
      {I("vaddss", {xmm(16), xmm(1), xmm(2)}), {0x62, 0xE1, 0x76, 0x08, 0x58, 0xC2}},  // vaddss xmm16, xmm1, xmm2
      {I("vpaddq", {xmm(17), xmm(1), xmm(2)}), {0x62, 0xE1, 0xF5, 0x08, 0xD4, 0xCA}},  // vpaddq xmm17, xmm1, xmm2
      {I("vaddpd", {zmm(31), zmm(30), zmm(29), Mask{kreg(7), false}}), {0x62, 0x01, 0x8D, 0x47, 0x58, 0xFD}},  // vaddpd zmm31{k7}, zmm30, zmm29
      {I("vmovups", {M(64, rax, {}, 1, 0x40), zmm(0)}), {0x62, 0xF1, 0x7C, 0x48, 0x11, 0x40, 0x01}},  // vmovups zmmword ptr [rax + 0x40], zmm0
      {I("vmovups", {zmm(0), M(64, rax, {}, 1, 0x2000)}), {0x62, 0xF1, 0x7C, 0x48, 0x10, 0x80, 0x00, 0x20, 0x00, 0x00}},  // vmovups zmm0, zmmword ptr [rax + 0x2000]
      {I("vmovups", {zmm(0), M(64, rax, {}, 1, 0x1fc0)}), {0x62, 0xF1, 0x7C, 0x48, 0x10, 0x40, 0x7F}},  // vmovups zmm0, zmmword ptr [rax + 0x1fc0]
      {I("vmovups", {zmm(0), M(64, rax, {}, 1, 0x44)}), {0x62, 0xF1, 0x7C, 0x48, 0x10, 0x80, 0x44, 0x00, 0x00, 0x00}},  // vmovups zmm0, zmmword ptr [rax + 0x44]
      {I("vmovaps", {ymm(20), M(32, rcx, rdx, 4, -0x1000)}), {0x62, 0xE1, 0x7C, 0x28, 0x28, 0x64, 0x91, 0x80}},  // vmovaps ymm20, ymmword ptr [rcx + rdx*4 - 0x1000]
      {I("vmovss", {xmm(16), M(4, rax, {}, 1, 0x1fc)}), {0x62, 0xE1, 0x7E, 0x08, 0x10, 0x40, 0x7F}},  // vmovss xmm16, dword ptr [rax + 0x1fc]
      {I("vbroadcastss", {zmm(1), M(4, r12, {}, 1, 8)}), {0x62, 0xD2, 0x7D, 0x48, 0x18, 0x4C, 0x24, 0x02}},  // vbroadcastss zmm1, dword ptr [r12 + 8]
      {I("vpbroadcastd", {zmm(2), gpr32(0)}), {0x62, 0xF2, 0x7D, 0x48, 0x7C, 0xD0}},  // vpbroadcastd zmm2, eax
      {I("vpbroadcastq", {zmm(2), r9}), {0x62, 0xD2, 0xFD, 0x48, 0x7C, 0xD1}},  // vpbroadcastq zmm2, r9
      {I("vpcmpd", {kreg(1), zmm(1), zmm(2), Imm{1}}), {0x62, 0xF3, 0x75, 0x48, 0x1F, 0xCA, 0x01}},  // vpcmpd k1, zmm1, zmm2, 1
      {I("vpcmpuq", {kreg(2), ymm(3), M(32, rax), Imm{4}, Mask{kreg(3), false}}), {0x62, 0xF3, 0xE5, 0x2B, 0x1E, 0x10, 0x04}},  // vpcmpuq k2{k3}, ymm3, ymmword ptr [rax], 4
      {I("vcmpps", {kreg(1), zmm(0), zmm(1), Imm{1}}), {0x62, 0xF1, 0x7C, 0x48, 0xC2, 0xC9, 0x01}},  // vcmpps k1, zmm0, zmm1, 1
      {I("vpcmpeqd", {kreg(1), zmm(0), zmm(1)}), {0x62, 0xF1, 0x7D, 0x48, 0x76, 0xC9}},  // vpcmpeqd k1, zmm0, zmm1
      {I("vpandq", {zmm(0), zmm(1), zmm(2)}), {0x62, 0xF1, 0xF5, 0x48, 0xDB, 0xC2}},  // vpandq zmm0, zmm1, zmm2
      {I("vpxord", {xmm(16), xmm(16), xmm(16)}), {0x62, 0xA1, 0x7D, 0x00, 0xEF, 0xC0}},  // vpxord xmm16, xmm16, xmm16
      {I("vpsraq", {zmm(1), zmm(2), Imm{3}}), {0x62, 0xF1, 0xF5, 0x48, 0x72, 0xE2, 0x03}},  // vpsraq zmm1, zmm2, 3
      {I("vpslld", {zmm(1), M(64, rax, {}, 1, 0x80), Imm{3}}), {0x62, 0xF1, 0x75, 0x48, 0x72, 0x70, 0x02, 0x03}},  // vpslld zmm1, zmmword ptr [rax + 0x80], 3
      {I("vpmullq", {zmm(5), zmm(6), zmm(7)}), {0x62, 0xF2, 0xCD, 0x48, 0x40, 0xEF}},  // vpmullq zmm5, zmm6, zmm7
      {I("vpmovdb", {xmm(0), zmm(1)}), {0x62, 0xF2, 0x7E, 0x48, 0x31, 0xC8}},  // vpmovdb xmm0, zmm1
      {I("vpmovqd", {M(32, rax, {}, 1, 0x20), zmm(1), Mask{kreg(1), false}}), {0x62, 0xF2, 0x7E, 0x49, 0x35, 0x48, 0x01}},  // vpmovqd ymmword ptr [rax + 0x20]{k1}, zmm1
      {I("vpmovzxbd", {zmm(0), M(16, rax, {}, 1, 0x10)}), {0x62, 0xF2, 0x7D, 0x48, 0x31, 0x40, 0x01}},  // vpmovzxbd zmm0, xmmword ptr [rax + 0x10]
      {I("vcvtusi2ss", {xmm(1), xmm(2), rax}), {0x62, 0xF1, 0xEE, 0x08, 0x7B, 0xC8}},  // vcvtusi2ss xmm1, xmm2, rax
      {I("vcvttsd2usi", {gpr32(0), xmm(20)}), {0x62, 0xB1, 0x7F, 0x08, 0x78, 0xC4}},  // vcvttsd2usi eax, xmm20
      {I("vcvtqq2pd", {zmm(0), zmm(1)}), {0x62, 0xF1, 0xFE, 0x48, 0xE6, 0xC1}},  // vcvtqq2pd zmm0, zmm1
      {I("vcvttps2udq", {ymm(0), ymm(17)}), {0x62, 0xB1, 0x7C, 0x28, 0x78, 0xC1}},  // vcvttps2udq ymm0, ymm17
      {I("vcvtph2ps", {zmm(0), M(32, rax, {}, 1, 0x40)}), {0x62, 0xF2, 0x7D, 0x48, 0x13, 0x40, 0x02}},  // vcvtph2ps zmm0, ymmword ptr [rax + 0x40]
      {I("vextractf64x4", {ymm(1), zmm(2), Imm{1}}), {0x62, 0xF3, 0xFD, 0x48, 0x1B, 0xD1, 0x01}},  // vextractf64x4 ymm1, zmm2, 1
      {I("vextracti32x4", {M(16, rax, {}, 1, 0x30), zmm(2), Imm{3}}), {0x62, 0xF3, 0x7D, 0x48, 0x39, 0x50, 0x03, 0x03}},  // vextracti32x4 xmmword ptr [rax + 0x30], zmm2, 3
      {I("vinsertf32x4", {zmm(1), zmm(2), xmm(3), Imm{2}}), {0x62, 0xF3, 0x6D, 0x48, 0x18, 0xCB, 0x02}},  // vinsertf32x4 zmm1, zmm2, xmm3, 2
      {I("vpermq", {zmm(0), zmm(1), Imm{0x4e}}), {0x62, 0xF3, 0xFD, 0x48, 0x00, 0xC1, 0x4E}},  // vpermq zmm0, zmm1, 0x4e
      {I("vpermd", {zmm(0), zmm(1), zmm(2)}), {0x62, 0xF2, 0x75, 0x48, 0x36, 0xC2}},  // vpermd zmm0, zmm1, zmm2
      {I("vblendmps", {zmm(0), zmm(1), zmm(2), Mask{kreg(1), false}}), {0x62, 0xF2, 0x75, 0x49, 0x65, 0xC2}},  // vblendmps zmm0{k1}, zmm1, zmm2
      {I("vrndscaleps", {zmm(0), zmm(1), Imm{1}}), {0x62, 0xF3, 0x7D, 0x48, 0x08, 0xC1, 0x01}},  // vrndscaleps zmm0, zmm1, 1
      {I("vpternlogd", {zmm(0), zmm(1), zmm(2), Imm{0x96}}), {0x62, 0xF3, 0x75, 0x48, 0x25, 0xC2, 0x96}},  // vpternlogd zmm0, zmm1, zmm2, 0x96
      {I("vmovdqu8", {M(64, rdi), zmm(3), Mask{kreg(2), false}}), {0x62, 0xF1, 0x7F, 0x4A, 0x7F, 0x1F}},  // vmovdqu8 zmmword ptr [rdi]{k2}, zmm3
      {I("vmovdqu64", {zmm(30), M(64, r13), Mask{kreg(4), true}}), {0x62, 0x41, 0xFE, 0xCC, 0x6F, 0x75, 0x00}},  // vmovdqu64 zmm30{k4}{z}, zmmword ptr [r13]
      {I("vfmadd231ps", {zmm(0), zmm(1), M(64, rsp, {}, 1, -0x40)}), {0x62, 0xF2, 0x75, 0x48, 0xB8, 0x44, 0x24, 0xFF}},  // vfmadd231ps zmm0, zmm1, zmmword ptr [rsp - 0x40]
      {I("vmovq", {M(8, rax, {}, 1, 8), xmm(17)}), {0x62, 0xE1, 0xFD, 0x08, 0x7E, 0x48, 0x01}},  // vmovq qword ptr [rax + 8], xmm17
      {I("vmovq", {xmm(17), M(8, rax, {}, 1, 8)}), {0x62, 0xE1, 0xFD, 0x08, 0x6E, 0x48, 0x01}},  // vmovq xmm17, qword ptr [rax + 8]
      {I("vpmovm2d", {zmm(0), kreg(1)}), {0x62, 0xF2, 0x7E, 0x48, 0x38, 0xC1}},  // vpmovm2d zmm0, k1
      {I("vpextrb", {M(1, rax, {}, 1, 5), xmm(16), Imm{1}}), {0x62, 0xE3, 0x7D, 0x08, 0x14, 0x40, 0x05, 0x01}},  // vpextrb byte ptr [rax + 5], xmm16, 1
  };
  for (const auto& c : cases) {
    const auto got = one(c.in);
    if (got != c.want) th_check::fail(__FILE__, __LINE__, to_string(c.in) + ": " + hex(got) + ", GNU as " + hex(c.want));
  }
}

// Jumps short and long (forward over 180 bytes, backward near and far), a call, rip-relative loads from a constant
// pool placed after the code by align and data: the whole program as GNU as lays it out.
void test_program() {
  std::vector<Instr> prog = {Instr::label("top"), I("xor", {gpr32(0), gpr32(0)}), I("jmp", {LabelRef{"fwd"}}), Instr::label("back"),
                             I("dec", {gpr32(1)}), I("jne", {LabelRef{"back"}}), I("call", {LabelRef{"fn"}}),
                             I("vmovaps", {ymm(0), rip_label(32, "pool")}), I("vbroadcastss", {zmm(17), rip_label(4, "pool", 8)})};
  for (int i = 0; i < 30; ++i) prog.push_back(I("vaddps", {zmm(0), zmm(1), zmm(2)}));
  std::vector<uint8_t> pool(16);
  for (int i = 0; i < 16; ++i) pool[i] = static_cast<uint8_t>(i);
  for (auto& in : {Instr::label("fwd"), I("jl", {LabelRef{"top"}}), I("ret", {}), Instr::label("fn"), I("jmp", {LabelRef{"top"}}),
                   Instr::align(32), Instr::label("pool"), Instr::bytes(pool)})
    prog.push_back(in);
  const auto out = assemble(prog);
  const std::string want =
      "31c0e9cf000000ffc975fce8cd000000c5fc2805e800000062e27d48180de600000062f1744858c262f1744858c262f1744858c262f17448"
      "58c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c2"
      "62f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1"
      "744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c262f1744858c20f8c24ffffffc3e91eff"
      "ffffcccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc000102030405060708090a0b0c0d0e0f";
  CHECK_EQ(hex(out.code), want);
  CHECK_EQ(out.labels.at("top"), 0u);
  CHECK_EQ(out.labels.at("back"), 7u);
  CHECK_EQ(out.labels.at("fn"), 0xddu);
  CHECK_EQ(out.labels.at("pool"), 0x100u);
  CHECK_EQ(out.labels.size(), 5u);
  // jmp b reaches b only while jmp a (between them) is short; jmp a's target is out of rel8 reach, so it grows, and
  // then jmp b must grow too
  std::vector<Instr> chain = {I("jmp", {LabelRef{"b"}}), I("jmp", {LabelRef{"a"}})};
  for (int i = 0; i < 124; ++i) chain.push_back(I("nop", {}));
  chain.push_back(Instr::label("b"));
  for (int i = 0; i < 10; ++i) chain.push_back(I("nop", {}));
  chain.push_back(Instr::label("a"));
  const auto c = assemble(chain);
  CHECK_EQ(c.labels.at("b"), 134u);
  CHECK_EQ(hex(std::vector<uint8_t>(c.code.begin(), c.code.begin() + 10)), "e981000000e986000000");
}

void test_registers() {
  for (const auto& [name, reg] : {std::pair{"rax", rax}, {"r15", r15}, {"r8d", gpr32(8)}, {"r12w", gpr16(12)}, {"r9b", gpr8(9)}, {"sil", gpr8(6)},
                                  {"esp", gpr32(4)}, {"xmm0", xmm(0)}, {"ymm17", ymm(17)}, {"zmm31", zmm(31)}, {"k7", kreg(7)}, {"rip", rip}}) {
    CHECK(parse_reg(name) == reg);
    CHECK_EQ(reg_name(reg), std::string(name));
  }
  CHECK(parse_reg("RAX") == rax);
  for (const char* bad : {"", "r", "r16", "r7", "r08", "xmm32", "xmm", "k8", "ah", "zmm-1", "eaxx", "r8q"}) CHECK(!parse_reg(bad));
  CHECK_EQ(reg_name(Reg{RegClass::Xmm, 40}), std::string("?"));
  CHECK_EQ(to_string(I("vaddps", {zmm(1), zmm(2), M(64, rax, rcx, 4, -0x40), Mask{kreg(1), true}})),
           std::string("vaddps zmm1, zmm2, zmmword ptr [rax + rcx*4 - 0x40], {k1}{z}"));
}

void test_refusals() {
  const auto refuses = [](const std::vector<Instr>& prog, const std::string& why) {
    try {
      assemble(prog);
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      if (msg.find(why) == std::string::npos || msg.find(to_string(prog.back())) == std::string::npos)
        th_check::fail(__FILE__, __LINE__, "message '" + msg + "' lacks '" + why + "' or the instruction");
      return;
    }
    th_check::fail(__FILE__, __LINE__, to_string(prog.back()) + " did not throw");
  };
  refuses({I("vpand", {xmm(16), xmm(1), xmm(2)})}, "VEX");
  refuses({I("vaddps", {xmm(0), xmm(1), gpr32(0)})}, "no form of vaddps takes (xmm, xmm, r32)");
  refuses({I("frob", {rax})}, "unknown mnemonic");
  refuses({I("add", {rax, Imm{0x80000000}})}, "no form");
  refuses({I("add", {M(0, rax), Imm{1}})}, "no form");
  refuses({I("mov", {rax, M(8, rax, rsp)})}, "index");
  refuses({I("mov", {rax, M(8, rax, rcx, 3)})}, "scale");
  refuses({I("mov", {rax, M(8, gpr32(0))})}, "base");
  refuses({I("mov", {rax, M(8, rip, rcx)})}, "no index");
  refuses({I("mov", {rax, Mem{8, rax, {}, 1, 0, "x"}})}, "rip");
  refuses({I("vaddps", {zmm(0), zmm(1), zmm(2), Mask{kreg(0), false}})}, "k0");
  refuses({I("vaddps", {zmm(0), Mask{kreg(1), false}, zmm(1)})}, "last");
  refuses({I("vcmpps", {kreg(1), zmm(0), zmm(1), Imm{1}, Mask{kreg(2), true}})}, "zeroing");
  refuses({I("vmovd", {xmm(16), gpr32(0), Mask{kreg(1), false}})}, "no write mask");
  refuses({I("add", {rax, rbx, Mask{kreg(1), false}})}, "EVEX");
  refuses({I("lock add", {rax, rbx})}, "lock");
  refuses({I("lock vaddps", {xmm(0), xmm(1), M(16, rax)})}, "lock");
  refuses({I("jmp", {LabelRef{"nowhere"}})}, "never defined");
  refuses({Instr::label("a"), Instr::label("a")}, "already defined");
  refuses({Instr::align(3)}, "power of two");
  refuses({I("mov", {Reg{RegClass::Gpr64, 16}, rax})}, "not a register");
  refuses({I("mov", {rip, rax})}, "not a register");
}

// Every mnemonic with operands drawn from a pool of every kind: each must encode or throw std::invalid_argument, never
// anything else (the sanitizer build checks the encoder's memory and arithmetic on the way).
void test_every_mnemonic_any_operands() {
  const std::vector<Operand> pool = {rax, gpr32(9), gpr16(4), gpr8(6), gpr8(1), xmm(0), xmm(15), xmm(31), ymm(8), ymm(20), zmm(3), zmm(29),
                                     kreg(0), kreg(5), Imm{0}, Imm{1}, Imm{-1}, Imm{0xff}, Imm{0x100}, Imm{INT32_MIN}, Imm{INT64_MAX},
                                     M(0, rax), M(1, rsp), M(2, r13, r12, 8, -0x80), M(4, {}, rcx, 2, 0x10), M(8, {}, {}, 1, 0x100),
                                     M(16, rbp, {}, 1, 64), M(32, r12), M(64, rdi, {}, 1, -0x40), M(12, rax), rip_label(8, "L"),
                                     LabelRef{"L"}, Mask{kreg(1), false}, Mask{kreg(2), true}};
  uint64_t state = 0x9E3779B97F4A7C15ull;
  const auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  size_t encoded = 0, refused = 0;
  auto names = mnemonics();
  CHECK(names.size() > 500);
  for (const auto mn : names) {
    for (int trial = 0; trial < 60; ++trial) {
      Instr in{std::string(trial % 7 == 6 ? "lock " : "") + std::string(mn), {}, {}};
      const size_t n = next() % 5;
      for (size_t i = 0; i < n; ++i) in.ops.push_back(pool[next() % pool.size()]);
      try {
        const auto out = assemble(std::vector<Instr>{in, Instr::label("L")});
        CHECK(!out.code.empty() && out.code.size() <= 15);
        ++encoded;
      } catch (const std::invalid_argument&) {
        ++refused;
      }
    }
  }
  CHECK(encoded > 100 && refused > 1000);
}

}  // namespace

int main() {
  test_encodings();
  test_program();
  test_registers();
  test_refusals();
  test_every_mnemonic_any_operands();
  std::cout << "test_x86_encode: ok\n";
  return 0;
}
