// Micro-benchmark behind dnnl_matmul.cpp kGemvRows: oneDNN matmul (packed weights) against
// cpu::small_gemm / small_gemm_panels for the 1280x1000 classifier, caches warm and flushed. Build:
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/gemv_probe.cpp src/backends/cpu/small_gemm.cpp -ldnnl -o /tmp/gemv_probe
//   M=1 OMP_NUM_THREADS=1 /tmp/gemv_probe
#include <oneapi/dnnl/dnnl.hpp>
#include "backends/cpu/small_gemm.h"
#include <chrono>
#include <cstdio>
#include <vector>
#include <random>
#include <cstdlib>
#include <omp.h>
using namespace dnnl; using tag = memory::format_tag; using dt = memory::data_type;
double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
std::vector<float> junk(12<<20);
void flush(){ for(size_t i=0;i<junk.size();i+=16) junk[i]+=1.f; }
template<class F> double timeit(F f, bool fl){ for(int i=0;i<5;i++) f(); double tot=0; int n=0; double best=1e9; for(int r=0;r<200;r++){ if(fl) flush(); double t=now(); f(); double d=now()-t; best=std::min(best,d); tot+=d; n++;} return best*1e3;}
int main(){
  int64_t M=atoi(getenv("M")?getenv("M"):"1"), K=1280,N=1000;
  engine eng(engine::kind::cpu,0); stream st(eng);
  std::vector<float> W(K*N), x(M*K), b(N), y(M*N), y2(M*N);
  std::mt19937 g(1); std::uniform_real_distribution<float> u(-1,1); for(auto&v:W)v=u(g); for(auto&v:x)v=u(g); for(auto&v:b)v=u(g);
  memory::desc sd({M,K},dt::f32,tag::ab), wd({K,N},dt::f32,tag::any), bd({1,N},dt::f32,tag::ab), dd({M,N},dt::f32,tag::ab);
  matmul::primitive_desc pd(matmul::desc(sd,wd,bd,dd),eng);
  memory wu({{K,N},dt::f32,tag::ba},eng); // Gemm transB: W is [N,K]
  memory wp(pd.weights_desc(),eng); reorder(wu,wp).execute(st,wu,wp); st.wait();
  // B as [K,N] from W [N,K] (transB): element (k,n) = W[n*K+k]
  float* wraw=(float*)wu.get_data_handle(); for(int64_t i=0;i<K*N;i++) wraw[i]=W[i];
  reorder(wu,wp).execute(st,wu,wp); st.wait();
  matmul mm(pd);
  memory mx(sd,eng,x.data()), mb(bd,eng,b.data()), my(dd,eng,y.data());
  auto f1=[&]{ mm.execute(st,{{DNNL_ARG_SRC,mx},{DNNL_ARG_WEIGHTS,wp},{DNNL_ARG_BIAS,mb},{DNNL_ARG_DST,my}}); st.wait(); };
  auto P=ferry::cpu::pack_panels(K,N,W.data(),1,K);
  auto f2=[&]{ ferry::cpu::small_gemm(M,x.data(),K,P,b.data(),y2.data(),N); };
  std::vector<float> y3(M*N);
  auto f3=[&]{ const int64_t panels=(N+63)/64; const int T=omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(T)
    for(int c=0;c<T;c++) ferry::cpu::small_gemm_panels(M,x.data(),K,P,b.data(),y3.data(),N,panels*c/T,panels*(c+1)/T); };
  for(int fl=0;fl<2;fl++){ printf("M=%ld flush=%d dnnl %.3f ms  small_gemm %.3f ms par %.3f impl %s\n",(long)M,fl,timeit(f1,fl),timeit(f2,fl),timeit(f3,fl),pd.impl_info_str()); }
  f1(); f2(); f3(); for(int64_t i=0;i<M*N;i++) if(y2[i]!=y3[i]) {printf("par mismatch\n");break;} double md=0; for(int64_t i=0;i<M*N;i++) md=std::max(md,(double)std::abs(y[i]-y2[i])); printf("maxdiff %g\n",md);
}
